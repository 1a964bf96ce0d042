# Shared by scripts/test-sanitizers.sh and scripts/check-deep.sh (sourced, not run).
# Builds go to build-asan/ (ASan + UBSan) and build-tsan/ (TSan): clang at -O1, as
# unity builds (CMakeLists.txt), which together compile in about a fifth of the
# time GCC's -O2 took; clang's sanitizers are the reference implementations.

san_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
supp="$san_root/tests/sanitizers"

# Any report fails: ASan and UBSan stop at the first one, TSan too, and leaks
# are checked at exit. Suppressions are only for libraries we do not build;
# each entry says why.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp:print_suppressions=0"
export OMP_NUM_THREADS=1
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# san_build DIR SANITIZERS [TARGET...]: configure DIR with BRAID_SANITIZE and build
# the targets (all of them when none is named).
san_build() {
  local dir="$1" san="$2"; shift 2
  cmake -S "$san_root" -B "$san_root/$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER=clang++ -DBRAID_SANITIZE="$san" >/dev/null
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$san_root/$dir" -j"$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" "${targets[@]+"${targets[@]}"}"
}

# san_ctest DIR CTEST_ARGS...: run tests of DIR, two at a time, output on failure.
san_ctest() {
  local dir="$1"; shift
  ctest --test-dir "$san_root/$dir" --output-on-failure -j2 "$@"
}

# san_time LABEL COMMAND...: run COMMAND, then record "LABEL: Ns" (and the exit
# status when it failed) in the summary; returns COMMAND's status.
san_summary=()
san_time() {
  local label="$1"; shift
  local t0=$SECONDS rc=0
  echo "== $label"
  "$@" || rc=$?
  local line
  line="$(printf '%-40s %4ds' "$label" $((SECONDS - t0)))"
  [ "$rc" -eq 0 ] && line+="  ok" || line+="  FAILED (exit $rc)"
  san_summary+=("$line")
  return "$rc"
}

san_print_summary() {
  echo "== sanitizer summary"
  printf '%s\n' "${san_summary[@]}"
}
