import pytest


@pytest.fixture(autouse=True)
def _tiny_models_run_on_one_thread(one_thread):
    """Every policy test uses tiny models (see `one_thread` in tests/conftest.py)."""
