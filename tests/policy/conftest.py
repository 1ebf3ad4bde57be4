import shutil

import pytest
import torch


@pytest.fixture(autouse=True)
def _tiny_models_run_on_one_thread(one_thread):
    """Every policy test uses tiny models (see `one_thread` in tests/conftest.py)."""


@pytest.fixture(scope="session")
def gqa_model_dir(nano_model_dir, tmp_path_factory):
    """The nano checkpoint's tokenizer with a random model whose 4 query heads share 2
    key/value heads (grouped-query attention, as SmolLM2's 9 share 3)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    out = tmp_path_factory.mktemp("gqa")
    shutil.copytree(nano_model_dir, out, dirs_exist_ok=True)
    config = AutoConfig.from_pretrained(out)
    config.num_key_value_heads = 2
    torch.manual_seed(1)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    return out
