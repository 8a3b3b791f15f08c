#!/usr/bin/env bash
# On an H200, from the project root: time the prefill layouts and the fused walk's variants side
# by side (ab), tune one family ($OP: gdn, the default, or deltanet) into a database that starts
# from the shipped snapshot, export the sm90 snapshot, run the family's GPU tests (agreement of
# tuned and default configs included), benchmark against the peers, and measure cold start and
# host overhead. Everything lands in $OUT (default ./h200-out).
#   [OP=deltanet|kda|gla|none] [AGREE=0] [AGREE_K=pytest -k] [TUNE_SETS="float16:128 bfloat16:64"] bash bench/h200.sh [ab|exact|pieces|tune|test|bench|decode|cold|all] [trials]
# TUNE_SETS: the dtype:width pairs to tune (default: the preset's own); TUNE_SHAPES: the rows to tune
# (tileops-tune's --shapes, e.g. h16:train-B4xT4096xH16; default: the family's preset).
# TUNE_FROM: a folder holding the tuning.db and tuning.optuna.db (and their -wal files) that an
# earlier call left in its $OUT, carried with this one: the tune goes on from there, every config
# measured there read back, not measured again, so a tune longer than a call runs in slices.
# Before, on the CPU machine, compile what the GPU would otherwise compile first (a prefill
# program takes ~25 s there) and pack it to travel with the call:
#   export TILELANG_CACHE_DIR=$PWD/.tlcache
#   tileops-tune --arch sm90 --op gdn --compile-only --trials 12   # the tuning run's candidates
#   tileops-db warm --arch sm90                                    # the shipped winners
#   python bench/tools/compile_gpu_tests.py                              # the GPU tests' prefill builds
#   python bench/tools/compile_gpu_tests.py --channel-prefill            # KDA's and GLA's (OP=kda|gla)
#   python bench/studies/gdn_prefill_dev.py --compile                      # the ab step's builds
#   python bench/studies/exact_pieces.py --compile; python bench/studies/entries_chain.py --compile  # the exact step's
#   python bench/studies/deltanet_pieces.py --compile; ... --tiles 0 64 --compile  # the pieces step's
#   tar cJf .tlcache.tar.xz .tlcache
set -uo pipefail
# No install step there: the checkout is on PYTHONPATH (.device/setup.sh puts it there), and
# tileops/__init__.py serves db/, dispatch/, tuner/ and cli/ as tileops.db, tileops.dispatch, ...
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import tileops.db, tileops.dispatch, tileops.tuner, tileops.cli" || exit 1
OUT=${OUT:-h200-out}
STEP=${1:-all}
TRIALS=${2:-6}
OP=${OP:-gdn}
TUNE_SETS=${TUNE_SETS:-preset}
TUNE_SHAPES=${TUNE_SHAPES:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export COLUMNS=${COLUMNS:-200}  # the tables in the logs one line a row (a pipe is 80 columns otherwise)
export TILEOPS_DB=$OUT/tuning.db
# Programs compiled ahead on a CPU machine (`tileops-tune --compile-only`, packed with
# `tar cJf .tlcache.tar.xz .tlcache`) travel as one archive; without it every first call compiles.
if [ -f .tlcache.tar.xz ] && [ -z "${TILELANG_CACHE_DIR:-}" ]; then
    tar xJf .tlcache.tar.xz && export TILELANG_CACHE_DIR=$PWD/.tlcache
fi
if [ "$STEP" = ab ]; then
    # Every check case, then each benchmark shape under its default and the other layouts; on the
    # fused rows the walk's variants, the default timed again last (its spread is the noise band).
    unset TILEOPS_DB
    timeout 540 python3 bench/studies/gdn_prefill_dev.py 2>&1 | tee "$OUT/ab.log"
fi
if [ "$STEP" = exact ]; then
    # Cut sequences under each gate kind: the warm-ups however far they reach, the shipped mix and
    # the exact schedule on every piece (its summaries over the plan's spans, and over whole pieces
    # where those are shorter), with their errors against float64.
    unset TILEOPS_DB
    timeout 300 python3 bench/studies/exact_pieces.py 2>&1 | grep -v -E "INFO|WARNING" | tee "$OUT/exact.log"
    # The entries chain alone: the shipped program against its fill of Φ along rows.
    timeout 120 python3 bench/studies/entries_chain.py 2>&1 | grep -v -E "INFO|WARNING" | tee -a "$OUT/exact.log"
fi
if [ "$STEP" = pieces ]; then
    # DeltaNet's few long sequences: 64-chunk pieces as the 2026-12-02 study timed them (with
    # errors), the summary tiles and state layouts with the entries timed alone, and each bench
    # row's call kernel by kernel with the host's share.
    unset TILEOPS_DB
    timeout 240 python3 bench/studies/deltanet_pieces.py --widths 64 --two-pass 2>&1 | grep -v -E "INFO|WARNING" | tee "$OUT/pieces.log"
    timeout 150 python3 bench/studies/deltanet_pieces.py --tiles 0 64 2>&1 | grep -v -E "INFO|WARNING" | tee -a "$OUT/pieces.log"
    timeout 120 python3 bench/studies/call_timeline.py --op deltanet 2>&1 | grep -v -E "INFO|WARNING" | tee -a "$OUT/pieces.log"
fi
if [ "$STEP" = tune ] || [ "$STEP" = all ]; then
    if [ -n "${TUNE_FROM:-}" ]; then
        # The earlier slice's database holds the shipped rows already, and winners that replace some.
        # With their write-ahead logs: a call cut short leaves its last commits there.
        cp "$TUNE_FROM"/tuning.db "$TUNE_FROM"/tuning.optuna.db "$OUT/" || exit 1
        cp "$TUNE_FROM"/tuning.db-wal "$TUNE_FROM"/tuning.optuna.db-wal "$OUT/" 2>/dev/null || true
        echo "going on from $TUNE_FROM" | tee "$OUT/tune.log"
    else
        # The shipped rows first, so that the export below keeps the keys this run does not tune.
        python3 -m tileops.cli.db import tileops/snapshots/sm90.jsonl 2>&1 | tail -n 1 | tee "$OUT/tune.log"
    fi
    start=$(date +%s)
    for set in $TUNE_SETS; do
        args=()
        [ "$set" != preset ] && args=(--dtype "${set%%:*}" --width "${set##*:}")
        [ -n "$TUNE_SHAPES" ] && args+=(--shapes "$TUNE_SHAPES")
        timeout 540 python3 -m tileops.cli.tune --arch sm90 --op "$OP" "${args[@]}" --trials "$TRIALS" --timeout 240 \
            2>&1 | tee -a "$OUT/tune.log"
    done
    echo "tuned $OP ($TUNE_SETS, $TRIALS trials a key) in $(( $(date +%s) - start )) s" | tee -a "$OUT/tune.log"
    python3 -m tileops.cli.db export --arch sm90 --out "$OUT/sm90.jsonl" 2>&1 | tee -a "$OUT/tune.log"
    # The tests below check the winners just tuned; copy the file into the repository to ship them.
    cp "$OUT/sm90.jsonl" tileops/snapshots/sm90.jsonl
fi
if [ "$STEP" = test ] || [ "$STEP" = all ]; then
    # One process per group, so that the groups' first compiles run side by side; -s keeps each
    # check's printed relative error in the logs.
    unset TILEOPS_DB
    run_group() {
        local name
        name=$(basename "$1" .py)
        [ "${2:-}" = -k ] && name="$name-$(printf %s "$3" | tr -cs "A-Za-z0-9" _ | cut -c1-60)"
        timeout "${TEST_TIMEOUT:-400}" python3 -m pytest -q -s -rA -p no:cacheprovider "$@" > "$OUT/$name.log" 2>&1
    }
    if [ "$OP" = none ]; then
        :  # the agreement below only
    elif [ "$OP" = deltanet ]; then
        run_group tests/kernels/deltanet/test_deltanet_prefill_gpu.py &
        run_group tests/kernels/deltanet/test_deltanet_chunk_fwd_gpu.py &
        run_group tests/kernels/deltanet/test_deltanet_chunk_bwd_gpu.py &
        run_group tests/kernels/decode/test_decode_families_gpu.py -k "deltanet or DeltaNet" &
        run_group tests/cli/test_bench_training.py &
        # The exact schedule's summaries are shared with GDN's cut sequences.
        run_group tests/kernels/gdn/test_gdn_prefill_gpu.py -k "exact or pieces" &
    elif [ "$OP" = kda ]; then
        # One process per group of builds, so that their compiles run side by side.
        for k in "k128-equal or hv2h" "packed and not value" "value-first or l2norm" "neg-eigval or flat-bias" \
                 "grid-bias or no-bias" "strongest or weak or steep" "thousand" "config-s1" "config-s2" "few_long or replays"; do
            run_group tests/kernels/kda/test_kda_prefill_gpu.py -k "$k" &
        done
        run_group tests/kernels/decode/test_decode_families_gpu.py -k "kda or KDA" &
    elif [ "$OP" = gla ]; then
        for k in "k128-equal or no-state" "packed" "strongest or weak or steep" "thousand" "config-s1" "config-s2" "cut"; do
            run_group tests/kernels/gla/test_gla_prefill_gpu.py -k "$k" &
        done
        run_group tests/kernels/decode/test_decode_families_gpu.py -k "gla or GLA" &
        run_group tests/kernels/gla/test_gla_chunk_fwd_gpu.py &
        for k in "state-dht" "neither" "strongest" "weak" "steep" "one-chunk" "graph" "autograd"; do
            run_group tests/kernels/gla/test_gla_chunk_bwd_gpu.py -k "$k" &
        done
    else
        run_group tests/kernels/gdn/test_gdn_decode_gpu.py &
        # The equal-length and packed builds one process per layout, so that 16 cores compile them.
        for layout in "[default-" "[key-" "[value-False or [value-True or [value-lengths" "[value-paired-" \
                      "[fused-False or [fused-True or [fused-lengths" "[fused-matrix-" "[fused-paired-" "[fused-ahead-" \
                      "[fused-3-" "[fused-tma-" "[fused-pieces-"; do
            run_group tests/kernels/gdn/test_gdn_prefill_gpu.py -k "(equal_lengths or packed_varlen) and ($layout)" &
        done
        run_group tests/kernels/gdn/test_gdn_prefill_gpu.py -k "pieces or spans or warm_start or wide or strided or exact or reset or a_log or offsets" &
        run_group tests/kernels/gdn/test_gdn_op_gpu.py &
        run_group tests/kernels/decode/test_decode_families_gpu.py &
        timeout 400 python3 bench/studies/gdn_prefill_dev.py --only check > "$OUT/prefill-errors.log" 2>&1 &
    fi
    # Each shipped row compiles a random other config of its key: the rows (AGREE_K selects them,
    # default all) are dealt to AGREE_JOBS processes, so that their compiles run side by side
    # (AGREE=0: the family's own tests only).
    if [ "${AGREE:-1}" = 1 ]; then
        jobs=${AGREE_JOBS:-12}
        mapfile -t rows < <(python3 -m pytest -q --collect-only -p no:cacheprovider \
            tests/tuner/test_tuned_default_agree.py -k "${AGREE_K:-test_}" 2>/dev/null | grep '::')
        for ((j = 0; j < jobs; j++)); do
            mine=()
            for ((i = j; i < ${#rows[@]}; i += jobs)); do mine+=("${rows[i]}"); done
            [ ${#mine[@]} -gt 0 ] && timeout "${TEST_TIMEOUT:-400}" python3 -m pytest -q -s -rA -p no:cacheprovider \
                "${mine[@]}" > "$OUT/test_agree-$j.log" 2>&1 &
        done
        [ "$OP" != none ] && run_group tests/dispatch/test_warnings.py tests/ops/test_autograd.py tests/ops/test_compile.py &
    fi
    wait
    tail -n 3 "$OUT"/test_*.log "$OUT"/prefill-errors.log 2>/dev/null
    # One archive of the logs, so that few files come back.
    (cd "$OUT" && tar czf test-logs.tar.gz test_*.log $(ls prefill-errors.log 2>/dev/null) && rm -f test_*.log prefill-errors.log)
fi
if [ "$STEP" = bench ] || [ "$STEP" = all ]; then
    unset TILEOPS_DB
    # The peers' compiles (TileOPs through TileLang, FLA through Triton) land in the same folder,
    # which comes back packed: carried as .tlcache.tar.xz, it spares the next run their compiles.
    export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-$PWD/.tlcache} TRITON_CACHE_DIR=$PWD/.tlcache/triton
    python3 -m tileops.cli.db warm --op "$OP" 2>&1 | tail -n 2 | tee "$OUT/bench.log"  # the family's shipped winners into the cache
    # FLA's first calls (Triton's autotuning) for GLA's four rows take over 300 s (docs/benchmarks.md).
    timeout 560 python3 -m tileops.cli.bench --op "$OP" --out "$OUT" --peer-timeout 420 2>&1 | tee -a "$OUT/bench.log"
    tar cJf "$OUT/tlcache.tar.xz" -C "$TILELANG_CACHE_DIR/.." "$(basename "$TILELANG_CACHE_DIR")"
fi
if [ "$STEP" = decode ] || [ "$STEP" = all ]; then
    # The other families' decode rows, ours and both peers in one call each.
    unset TILEOPS_DB
    export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-$PWD/.tlcache} TRITON_CACHE_DIR=$PWD/.tlcache/triton
    for op in deltanet kda gla; do
        timeout 240 python3 -m tileops.cli.bench --op "$op" --rows decode --out "$OUT/$op" --peer-timeout 150 2>&1 | tee -a "$OUT/decode-bench.log"
    done
fi
if [ "$STEP" = cold ] || [ "$STEP" = all ]; then
    unset TILEOPS_DB
    # Each row starts from an empty cache (its programs compiled and kept: about 22 s for a
    # prefill), then `tileops-db warm --no-shipped` warms the row's own winner before the warm run.
    timeout 540 python3 -m tileops.cli.bench --op "$OP" --cold-start 2>&1 | tee "$OUT/cold.log"
    python3 -m tileops.cli.bench --overhead 2>&1 | tee -a "$OUT/cold.log"
fi
