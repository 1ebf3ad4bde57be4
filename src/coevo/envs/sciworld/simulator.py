"""The ScienceWorld JVM behind a guard: every call has a time limit, a dead JVM is replaced.

`Simulator` owns one JVM (through the `scienceworld` package) for its whole life and talks to
its Java `PythonInterface` directly: `step` is `server.step` + `getScore` + `getCompleted`, three
round trips, where the package's own `ScienceWorldEnv.step` also computes the look-around text,
the inventory, the task description and every valid action-object combination on every step.

The JVM is started with a constant identity hash (`DETERMINISM_FLAGS`, when `java` accepts
it), which makes the simulator reproducible: the same actions give the same observations.

Each call runs on one worker thread and waits at most `timeout` seconds. A call that hangs, or
a JVM that died (killed, crashed, out of memory), raises `SimulatorError` after the JVM has been
killed and a fresh one started, so the caller can end the episode and carry on. The JVM is
closed by `close()` and, failing that, at interpreter exit. A death costs one warning line:
py4j's own tracebacks (about 50 lines each) are silenced, since the episode says what happened.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import re
import shutil
import subprocess
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from coevo.envs.base import EnvError

log = logging.getLogger(__name__)
T = TypeVar("T")

INSTALL_HINT = "pip install 'coevo[sciworld]'"

# ScienceWorld keeps world objects in hash sets keyed by identity hash codes, which the JVM
# draws at random; their iteration order decides the order objects are listed in and the order
# of heat-transfer updates, so two replays of the same actions differ (measured: 15 of 28 gold
# replays). A constant identity hash makes every set iterate in insertion order, the same on
# every load: 0 of 28 differed, at the same speed. The flag is experimental in HotSpot, so it is
# only used when `java` accepts it.
DETERMINISM_FLAGS = "-XX:+UnlockExperimentalVMOptions -XX:hashCode=2"

# Without a cap a JVM sizes its heap to a quarter of the machine's memory and grows into it: one
# ScienceWorld JVM of a learning run held 2.7 GB after a few hundred episodes (24 GB machine),
# and a rollout runs one JVM per concurrent episode. Replaying six gold paths needed 289 MB of
# resident memory under a 256 MB heap, at the speed of an uncapped one.
JAVA_HEAP = "512m"
_HEAP = re.compile(r"[1-9][0-9]*[kKmMgG]?")


def jvm_flags(heap: str | None, deterministic: bool) -> str:
    """The options each ScienceWorld JVM starts with: a heap cap (None: the JVM's default, or
    the user's own JAVA_TOOL_OPTIONS) and the determinism flags where java takes them."""
    if heap is not None and not _HEAP.fullmatch(heap):
        raise EnvError(
            f"java_heap must be a JVM heap size such as 512m or 2g (or null), got {heap!r}."
        )
    flags = [f"-Xmx{heap}"] if heap is not None else []
    if deterministic:
        flags.append(DETERMINISM_FLAGS)
    return " ".join(flags)


class SimulatorError(RuntimeError):
    """The JVM hung or died during a call; it has been restarted. `kind` is timeout or died."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def quiet_py4j() -> None:
    """Silence py4j's error tracebacks about a lost JVM; `Simulator.call` reports it in one line.

    py4j logs them on its `py4j.*` loggers, and one more through the root logger itself
    (`logging.exception` in `send_command`), which a logger level cannot reach: a filter on the
    root logger drops the records that come from py4j's own files, and only those.
    """
    import py4j

    for name in ("py4j.java_gateway", "py4j.clientserver"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    root = logging.getLogger()
    if not any(isinstance(f, _FromPy4j) for f in root.filters):
        root.addFilter(_FromPy4j(os.path.dirname(py4j.__file__)))


class _FromPy4j(logging.Filter):
    def __init__(self, package_dir: str) -> None:
        super().__init__()
        self.package_dir = package_dir + os.sep

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.pathname.startswith(self.package_dir)


def require_package() -> str:
    """Return the installed scienceworld version, or raise a clear error naming the fix."""
    try:
        from scienceworld import __version__
    except ImportError as exc:
        raise EnvError(
            f"The sciworld env needs the scienceworld package (and Java 17): {INSTALL_HINT}."
        ) from exc
    if shutil.which("java") is None:
        raise EnvError(
            "The sciworld env needs a Java runtime (17 or newer) on PATH: install one, e.g. "
            "`apt-get install openjdk-17-jre-headless`."
        )
    return str(__version__)


@functools.cache
def jvm_accepts(flags: str) -> bool:
    """Whether the `java` on PATH starts with these options."""
    try:
        done = subprocess.run(
            ["java", *flags.split(), "-version"], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@contextlib.contextmanager
def _java_tool_options(flags: str) -> Iterator[None]:
    """Add JVM options for the processes started inside (the package launches java itself)."""
    before = os.environ.get("JAVA_TOOL_OPTIONS")
    if flags:
        os.environ["JAVA_TOOL_OPTIONS"] = f"{before} {flags}" if before else flags
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("JAVA_TOOL_OPTIONS", None)
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = before


def _close_quietly(raw: Any, polite: bool = True) -> None:
    """Stop a package env's JVM: shut the gateway down, then kill what is left.

    `polite=False` kills first: a hung (or stopped) JVM may never answer the shutdown call.
    """
    proc = getattr(getattr(raw, "_gateway", None), "java_process", None)
    if not polite and proc is not None and proc.poll() is None:
        proc.kill()
    # A dead JVM cannot be shut down politely: it is (or gets) killed either way.
    with contextlib.suppress(Exception):
        raw._gateway.shutdown()
    # The package's own __del__ would try the polite shutdown again on a dead gateway.
    raw.close = lambda: None
    if proc is not None and proc.poll() is None:
        proc.kill()
    if proc is not None:
        try:
            proc.wait(timeout=10)
        except Exception:
            log.warning("java process %s did not exit after kill", proc.pid)


class Simulator:
    """One ScienceWorld JVM with time-limited calls and automatic restart."""

    def __init__(
        self, timeout: float = 30.0, start_timeout: float = 120.0, heap: str | None = JAVA_HEAP
    ) -> None:
        self.version = require_package()
        quiet_py4j()
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.restarts = 0
        self.deterministic = jvm_accepts(DETERMINISM_FLAGS)
        """Whether replays are reproducible (the JVM took `DETERMINISM_FLAGS`)."""
        if not self.deterministic:
            log.warning(
                "java does not accept %s: ScienceWorld replays of the same actions may differ",
                DETERMINISM_FLAGS,
            )
        self._flags = jvm_flags(heap, self.deterministic)  # a bad size fails before any JVM
        self._raw: Any = None
        self._server: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        # atexit keeps only a weak reference, so an env dropped early is still collected.
        ref = weakref.ref(self)
        self._atexit = lambda: (s := ref()) is not None and s.close()
        atexit.register(self._atexit)
        self._start()

    # -- lifecycle -------------------------------------------------------------------------

    def _start(self) -> None:
        from scienceworld import ScienceWorldEnv

        self._pool = ThreadPoolExecutor(1, thread_name_prefix="sciworld-jvm")
        try:
            with _java_tool_options(self._flags):
                future = self._pool.submit(ScienceWorldEnv, "", None, 10**9)
                self._raw = future.result(self.start_timeout)
        except FutureTimeout as exc:
            self._pool.shutdown(wait=False)
            raise EnvError(
                f"The ScienceWorld JVM did not start within {self.start_timeout:.0f}s: check "
                "that `java -version` works and the machine is not out of memory."
            ) from exc
        except Exception as exc:
            self._pool.shutdown(wait=False)
            raise EnvError(
                f"The ScienceWorld JVM failed to start ({type(exc).__name__}: {exc}): check "
                "that `java -version` reports 17 or newer."
            ) from exc
        self._server = self._raw.server

    @property
    def pid(self) -> int | None:
        """Process id of the current JVM (tests kill it to exercise recovery)."""
        proc = getattr(getattr(self._raw, "_gateway", None), "java_process", None)
        return None if proc is None else proc.pid

    @property
    def raw(self) -> Any:
        """The package's own `ScienceWorldEnv` on this JVM (benchmarks compare against it)."""
        return self._raw

    def restart(self) -> None:
        """Kill the JVM (whatever state it is in) and start a fresh one."""
        self._shutdown(polite=False)
        self.restarts += 1
        self._start()

    def _shutdown(self, polite: bool = True) -> None:
        raw, pool = self._raw, self._pool
        self._raw = self._server = self._pool = None
        if raw is not None:
            _close_quietly(raw, polite)
        if pool is not None:
            # The worker is unblocked by the JVM's death; never wait on it here.
            pool.shutdown(wait=False)

    def close(self) -> None:
        """Stop the JVM. Safe to call twice."""
        with self._lock:
            self._shutdown()
        atexit.unregister(self._atexit)

    def __del__(self) -> None:
        # Interpreter shutdown may already have torn modules down: best effort only.
        with contextlib.suppress(Exception):
            self.close()

    # -- guarded calls ---------------------------------------------------------------------

    def call(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """Run `fn(server, *args)` on the JVM thread; restart and raise SimulatorError on trouble."""
        with self._lock:
            if self._pool is None:
                raise EnvError("The ScienceWorld simulator is closed: make a new env.")
            future = self._pool.submit(fn, self._server, *args)
            limit = self.timeout if timeout is None else timeout
            try:
                return future.result(limit)
            except FutureTimeout:
                kind, message = "timeout", f"no answer within {limit:.0f}s"
            except Exception as exc:  # py4j network/protocol errors or a Java exception
                kind, message = "died", f"{type(exc).__name__}: {str(exc).strip()[:300]}"
            log.warning("ScienceWorld JVM %s (%s); restarting it", kind, message)
            self._shutdown(polite=False)
            self.restarts += 1
            self._start()
            raise SimulatorError(kind, f"the simulator {kind}: {message}; it was restarted")

    # -- the simulator's API, as plain values ----------------------------------------------

    def load(self, task_name: str, variation: int, simplification: str) -> str:
        """Load a task variation (state as after reset) and return the look-around text."""
        return self.call(_load_and_look, task_name, variation, simplification)

    def step(self, action: str) -> tuple[str, int, bool]:
        """One action: (observation, score 0-100 or negative, simulator says done)."""
        return self.call(_step, action)

    def gold_actions(self, task_name: str, variation: int, simplification: str) -> list[str]:
        """The simulator's gold action sequence for a task variation (can take seconds)."""
        return self.call(_gold, task_name, variation, simplification, timeout=self.timeout * 10)

    def task_description(self) -> str:
        return self.call(lambda server: str(server.freeActionTaskDesc()))

    def task_names(self) -> list[str]:
        return self.call(lambda server: [str(n) for n in server.getTaskNames()])

    def variations(self, task_name: str) -> dict[str, list[int]]:
        """The package's train/dev/test variation ids of a task type."""
        return self.call(_variations, task_name)


def _load_and_look(server: Any, task_name: str, variation: int, simplification: str) -> str:
    # `load` leaves the world exactly as `reset` would (checked: same look-around text), so
    # the package's extra `reset` round trip is skipped.
    server.load(task_name, variation, simplification, False)
    return str(server.step("look around"))


def _step(server: Any, action: str) -> tuple[str, int, bool]:
    observation = str(server.step(action))
    # Same conversion as the package: the simulator keeps the score in [0, 1] (negative on
    # a failed task); the package and the papers use 0-100 integers.
    score = int(round(100 * server.getScore()))
    return observation, score, bool(server.getCompleted()) or score < 0


def _gold(server: Any, task_name: str, variation: int, simplification: str) -> list[str]:
    server.load(task_name, variation, simplification, True)
    return [str(a) for a in server.getGoldActionSequence()]


def _variations(server: Any, task_name: str) -> dict[str, list[int]]:
    server.load(task_name, 0, "", False)
    return {
        "train": [int(v) for v in server.getVariationsTrain()],
        "dev": [int(v) for v in server.getVariationsDev()],
        "test": [int(v) for v in server.getVariationsTest()],
    }
