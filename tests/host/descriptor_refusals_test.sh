#!/usr/bin/env bash
# Precision by stage and by path (SPEC 4.1, appended to ABI version 2):
# every defect of a descriptor's stages or paths is refused at load through
# the command line, exit 2 with one line on stderr naming the file, the
# descriptor, the path and the field; the valid build of the same plugin,
# and one with last_path but no paths, are listed.
#   Usage: descriptor_refusals_test.sh ATTNCHECK PLUGIN_DIR
#   (the plugins are tests/host/plugins/bad_stages.c, one build per defect)
set -u
bin=$1
dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# refused DEFECT PATTERN: `list --plugin` of the build with DEFECT exits 2
# with one stderr line matching PATTERN (grep -F, after the file name).
refused() {
  local defect=$1 pattern=$2
  local plugin=$dir/libplugin_stages_$defect.so
  "$bin" list --plugin "$plugin" >"$tmp/out" 2>"$tmp/err"
  refused_with_one_line "$defect" $? "$tmp/err" -F -- \
    "$plugin: descriptor 0 (name 'bad_stages'): $pattern"
}

# listed BUILD: `list --plugin` of BUILD exits 0 and lists bad_stages.
listed() {
  local plugin=$dir/libplugin_stages_$1.so
  "$bin" list --plugin "$plugin" >"$tmp/out" 2>"$tmp/err"
  local code=$?
  [[ $code -eq 0 ]] || { fail "$1: exit $code, expected 0"; sed 's/^/  | /' "$tmp/err"; }
  grep -q 'bad_stages' "$tmp/out" || fail "$1: bad_stages is not listed"
}

listed valid
listed last_path_no_paths
listed q8_0_q_cast

refused bad_stage_bits 'unknown stages.set bits 0x10'
refused bad_stage_format 'stages.score_accum 9 is no dtype'
refused bad_e5m2_accum 'stages.softmax_accum 5 is e5m2, an input format only'
refused bad_e4m3_accum 'stages.pv_accum 4 is e4m3, an input format only'
refused bad_q4_0_q_cast 'stages.q_cast 7 (Q4_0) is never a q_cast'
# SPEC 1.2 and 5.1: the block formats are K/V storage (and Q8_0 a q_cast) only.
refused bad_q8_0_accum 'stages.softmax_accum 6 is q8_0, a block format for K/V only'
refused bad_q8_0_p_cast 'precision.p_cast 6 is q8_0, a block format for K/V only'
refused bad_q4_0_s_cast 's_cast 7 is q4_0, a block format for K/V only'
refused bad_block_dtype_bit 'dtypes 0x41 has a bit of Q8_0 or Q4_0'
refused bad_block_q_dtype 'combos[1].q_dtype 6 is q8_0, a block format for K/V only'
refused bad_block_out 'combos[1].out_dtype 7 is q4_0, a block format for K/V only'
refused bad_q_cast_format 'stages.q_cast 9 is no dtype'
refused bad_ftz 'unknown ftz_formats bits 0x10'
refused bad_n_paths 'implausible n_paths 65 (at most 64)'
refused bad_null_paths 'n_paths is 2 but paths is NULL'
refused bad_path_size 'paths[0].struct_size is 40, smaller than attncheck_path (72 bytes)'
refused bad_path_stride "paths[1].struct_size is 80, but paths[0]'s is 72 (the array stride)"
refused bad_path_null_name 'paths[1]: name is NULL'
refused bad_path_long_name 'paths[1]: name is longer than 255 characters'
refused bad_path_name "paths[1]: name 'Tiled Path' is not of the form [a-z0-9_.-]+"
refused bad_path_repeated "paths[1] (path 'short'): paths[0] has the same name"
refused bad_path_accum "paths[1] (path 'tiled'): precision.accum 9 is no dtype"
refused bad_path_stage "paths[1] (path 'tiled'): stages.pv_accum 5 is e5m2"
refused bad_path_ftz "paths[1] (path 'tiled'): unknown ftz_formats bits 0x20"
refused bad_tighter "paths[1] (path 'tiled'): the descriptor's own precision is tighter than this path's (score_accum f32 is tighter than bf16)"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "every refusal is one line, exit 2"
