#!/usr/bin/env bash
# CI's sanitizer pass, run after scripts/test.sh: builds only what it runs, at -O2.
#   ASan + UBSan: the dist suite (ranks as threads) and the parallel tests of the
#                 failure paths (a failing rank, an abort, a config error), where
#                 buffers are freed while peers may still be using them;
#   TSan:         the dist suite.
# (The dist suite without its largest all-reduces and zero-copy cases on 5 to 8 ranks; see below.)
# Any sanitizer report fails the run. Every suite under both is scripts/check-deep.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/sanitizers.bash"

# Parallel tests whose names show a failure path.
failure_paths='Fail|Abort|Error|Reject|Invalid'
# The 4 MiB all-reduces on 5 to 8 ranks are half of the dist suite's time
# under either sanitizer; 1 to 4 ranks take the same chunked ring paths. The
# zero-copy suite on 5 to 8 ranks likewise repeats the paths of 2 to 4.
# scripts/check-deep.sh runs them.
# The node-map suites: 8 of the 16 maps (1 to 5 ranks, even, uneven, interleaved)
# take every hierarchical path; the larger maps, the multi-chunk all-reduces and
# the big private buffers repeat them. (ctest's names of parameterised tests end
# in "  # GetParam() = ...".)
skip_large='AllReduceLarge/np[5-8]|SharedBuffers/np[5-8]|CollectiveNodesLarge|CollectiveNodesMaps.SharedBuffers'
skip_large+='|CollectiveNodes.*nodes_(3_3|2_2_2|4_3|4_4|2_2_2_2|1_1_1_1_1_1_1_1|0_1_2_0_1_2|0_0_1_1_0_1)( |$)'
rc=0
if san_time "asan+ubsan build" san_build build-asan address,undefined test_dist test_parallel; then
  san_time "asan+ubsan dist" san_ctest build-asan -L '^dist$' -E "$skip_large" || rc=1
  san_time "asan+ubsan parallel failure paths" \
    san_ctest build-asan -L '^parallel$' -R "$failure_paths" || rc=1
else
  rc=1
fi
if san_time "tsan build" san_build build-tsan thread test_dist; then
  san_time "tsan dist" san_ctest build-tsan -L '^dist$' -E "$skip_large" || rc=1
else
  rc=1
fi
san_print_summary
exit "$rc"
