# Every finding in a compute-sanitizer log, counted by what it is and where it was: the kernel it
# ran in (device side), or the CUDA call and the first dp frame that made it (host side). The log
# prints each finding's first lines only up to a limit; this sees all of them (verify.sh sanitize).
#   awk -f tools/gpu/sanitizer_tally.awk LOG | sort -rn
function flush() {
  if (kind != "") n[kind "  |  " (at != "" ? at : (api != "" ? api : "?") (dpf != "" ? " from " dpf : ""))]++
  kind = at = api = dpf = ""
}
/^========= [A-Z]/ && !/ERROR SUMMARY|COMPUTE-SANITIZER|Saved host backtrace/ {
  flush(); kind = substr($0, 11); gsub(/0x[0-9a-f]+/, "X", kind); next
}
/^=========     at / {
  if (at == "") { at = $0; sub(/^=========     at /, "", at); sub(/\+0x[0-9a-f]+.*$/, "", at); at = substr(at, 1, 120) }
  next
}
/Host Frame: cu[A-Za-z_0-9]+ / { if (api == "") { api = $0; sub(/.*Host Frame: /, "", api); sub(/ .*/, "", api) }; next }
/Host Frame: dp::/ { if (dpf == "") { dpf = $0; sub(/.*Host Frame: /, "", dpf); sub(/\(.*$/, "", dpf) }; next }
END { flush(); for (k in n) printf "%7d  %s\n", n[k], k }
