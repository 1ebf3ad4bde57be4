"""Where a shop's catalog file comes from: the generator or real WebShop files, cached on disk.

Catalog files live in `cache_dir`, else `$COEVO_CACHE/shop`, else `~/.cache/coevo/shop`, named
by everything that determines their content (generator version, catalog format, seed and size;
or, for real data, the data files' paths, sizes and modification times). A missing file is
built once and renamed into place, so concurrent processes at worst build it twice.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from coevo.config import coevo_cache
from coevo.envs.shop.catalog import Catalog, write_catalog
from coevo.envs.shop.generator import GENERATOR_VERSION, generate_products
from coevo.progress import bar as progress_bar

CATALOG_FORMAT = 1
"""Part of every cache key: bump it when the catalog file layout changes."""
_SHOW_PROGRESS_FROM = 20_000


def cache_root(cache_dir: str | Path | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    return coevo_cache("shop")


def generated_catalog(
    n_products: int, seed: int, cache_dir: str | Path | None = None, memory_cache: int = 20_000
) -> Catalog:
    """The generated catalog of `n_products` products for `seed`, built on first use."""
    name = f"generated-g{GENERATOR_VERSION}-c{CATALOG_FORMAT}-seed{seed}-n{n_products}.sqlite"
    path = cache_root(cache_dir) / name
    if not path.exists():
        meta = {"source": "generated", "seed": seed, "generator_version": GENERATOR_VERSION}
        products = generate_products(n_products, seed)
        if n_products < _SHOW_PROGRESS_FROM:
            write_catalog(path, products, meta)
        else:
            label = f"building the shop catalog ({n_products:,} products)"
            with progress_bar(stderr=True, transient=True) as bar:
                job = bar.add_task(label, total=n_products)
                write_catalog(path, products, meta, progress=lambda n: bar.update(job, completed=n))
    return Catalog(path, cache_size=memory_cache)


def real_catalog(
    data: str | Path, seed: int, cache_dir: str | Path | None = None, memory_cache: int = 20_000
) -> Catalog:
    """A catalog (with its goals) from a directory in WebShop's data layout; see `loader`."""
    from coevo.envs.shop.loader import find_files, load_webshop

    files = find_files(Path(data))
    key = hashlib.sha256()
    for file in files:
        if file is not None:
            stat = file.stat()
            key.update(f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    key.update(f"seed={seed}".encode())
    path = cache_root(cache_dir) / f"webshop-c{CATALOG_FORMAT}-{key.hexdigest()[:16]}.sqlite"
    if not path.exists():
        products, goals = load_webshop(Path(data), seed)
        meta = {"source": "webshop", "data": str(Path(data).resolve()), "seed": seed}
        write_catalog(path, products, meta, goals)
    return Catalog(path, cache_size=memory_cache)
