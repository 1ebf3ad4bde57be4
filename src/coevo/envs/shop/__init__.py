"""The `shop` environment: WebShop's text shop over a generated or real product catalog.

Modules: `vocabulary` and `generator` (seeded products), `catalog` (SQLite + FTS5 BM25),
`source` (cached catalog files), `loader` (real WebShop files), `goals` (instructions and
splits), `pages` (page text and the action grammar), `reward` (WebShop's reward), `expert`,
`env` (`ShopEnv`).
"""

from coevo.envs.shop.env import ShopEnv

__all__ = ["ShopEnv"]
