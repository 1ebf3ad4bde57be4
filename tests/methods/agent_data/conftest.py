"""The envs' session fixtures, shared with their own tests (one catalog / data set each)."""

from tests.envs.bfcl.conftest import bfcl_env  # noqa: F401
from tests.envs.shop.conftest import shop, shop_cache  # noqa: F401
from tests.envs.sql.conftest import sql_cache, sql_env  # noqa: F401
