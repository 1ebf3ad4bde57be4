"""The generator's determinism, the catalog file (atomic, cached) and its search."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import coevo
from coevo.envs.shop import ShopEnv
from coevo.envs.shop.catalog import Catalog, query_terms, write_catalog
from coevo.envs.shop.generator import generate_products
from coevo.envs.shop.vocabulary import PRODUCT_TYPES, TOP_CATEGORIES

FINGERPRINT = (
    "import hashlib, coevo; from coevo.envs.shop.generator import generate_products; "
    "print(coevo.__file__); "
    "print(hashlib.sha256(''.join(p.to_json() for p in generate_products(300, 5)).encode())"
    ".hexdigest())"
)


def importable() -> str:
    """The child's PYTHONPATH: where this process found coevo, whether installed or only on
    PYTHONPATH (a source checkout), then this process's own PYTHONPATH; nothing else."""
    here = str(Path(coevo.__file__).resolve().parents[1])
    return os.pathsep.join(
        [here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )


def test_generator_is_deterministic_across_processes_and_hash_seeds():
    here = hashlib.sha256(
        "".join(p.to_json() for p in generate_products(300, 5)).encode()
    ).hexdigest()
    for hash_seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", FINGERPRINT],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": hash_seed, "PATH": "", "PYTHONPATH": importable()},
        )
        found, fingerprint = out.stdout.splitlines()
        assert Path(found).resolve() == Path(coevo.__file__).resolve()  # the same coevo
        assert fingerprint == here
    assert list(generate_products(50, 1)) != list(generate_products(50, 2))


def test_generator_covers_the_vocabulary():
    assert len(TOP_CATEGORIES) >= 5 and len(PRODUCT_TYPES) >= 50
    products = list(generate_products(640, 0))
    assert {p.query for p in products} == {t.name for t in PRODUCT_TYPES}
    assert len({p.asin for p in products}) == 640
    for p in products:
        assert p.title and p.description and p.bullets and p.reviews and p.attributes
        assert p.price > 0 and p.price_tag == f"${p.price:.2f}"
        labels = [v for _, values in p.options for v in values]
        assert len(labels) == len(set(labels))  # option labels are unique on a page
        assert p.product_category.count("›") >= 2


def test_catalog_file_is_written_atomically_and_reused(shop_cache, shop):
    files = sorted(shop_cache.iterdir())
    assert [f.suffix for f in files] == [".sqlite"]  # no temporary file left behind
    built = files[0].stat().st_mtime_ns
    again = ShopEnv(cache_dir=shop_cache, n_products=1500, n_train=60, n_test=20)
    assert files[0].stat().st_mtime_ns == built  # opened, not rebuilt
    assert again.tasks("train") == shop.tasks("train")
    again.close()


def test_product_round_trip_and_lookup(tmp_path):
    products = list(generate_products(30, 9))
    catalog = Catalog(write_catalog(tmp_path / "c.sqlite", products, {"source": "test"}))
    assert len(catalog) == 30 and catalog.meta["source"] == "test"
    for pid, product in enumerate(products, start=1):
        assert catalog.product(pid) == product
        assert catalog.id_of(product.asin) == pid
    assert catalog.id_of("B0NOTTHERE") is None
    catalog.close()


def test_search_finds_the_type_and_returns_fifty(shop):
    ids = shop.catalog.search("i am looking for a yoga mat")
    assert 10 <= len(ids) <= 50 and len(set(ids)) == len(ids)
    assert len(shop.catalog.search("yoga mat water bottle camping tent")) == 50
    assert all(shop.catalog.product(pid).query == "yoga mat" for pid in ids[:10])
    assert shop.catalog.search("yoga mats") == shop.catalog.search("yoga mat")  # stemming
    assert shop.catalog.search("") == () and shop.catalog.search("the a of") == ()


def test_query_terms_drop_stop_words_and_cap_length():
    assert query_terms("I am looking for THE Red-Shoes, red shoes!") == ["looking", "red", "shoes"]
    assert len(query_terms(" ".join(f"w{i}" for i in range(1000)))) == 32
