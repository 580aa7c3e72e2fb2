#!/usr/bin/env bash
# A guided tour of memlane through its CLI, on ./memlane.db (or $MEMLANE_DB).
set -euo pipefail
# shown ARGS...: the command as it can be pasted back into a shell (single quotes where needed)
shown() {
  local out=() arg
  for arg in "$@"; do
    if [[ $arg =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then out+=("$arg"); else out+=("'${arg//\'/\'\\\'\'}'"); fi
  done
  printf '%s' "${out[*]}"
}
step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "$(shown "${@:2}")"; "${@:2}"; }

memlane clear demo --yes >/dev/null
step "Write typed values at addresses (namespace, key)" \
  memlane set demo/user/42 preferences.ui.theme dark
memlane set demo/user/42 preferences.ui.font-size 14 >/dev/null
memlane set demo/user/42 preferences.editor '{"name": "helix", "tabs": 4}' >/dev/null
memlane set demo/user/42 version 3.12 --string >/dev/null
memlane set demo/room/eng session-digest "SESSION DIGEST: we ship the billing migration on Friday; Dana owns rollback." >/dev/null
memlane set demo/room/eng chat.1 "the session digest bot posted the session digest again, digest digest" >/dev/null
memlane set demo/room/eng chat.2 "session notes: digest the session digest before the next session" >/dev/null
step "Exact lookup: the agent knows the address" \
  memlane get demo/user/42 preferences.editor
step "The same key across every namespace, newest first (keyed recall)" \
  memlane fetch session-digest --prefix demo
step "List a namespace in address order" \
  memlane list demo/user/42
step "The taxonomy map an agent drills before it reads" \
  memlane summarize demo --depth 2
step "Search by topic: BM25 ranks chattier notes above the digest" \
  memlane search "session digest" --prefix demo --limit 3
step "Replace a value: the old version goes to history" \
  memlane set demo/user/42 preferences.ui.theme light
step "History of that address" \
  memlane history demo/user/42 preferences.ui.theme
step "A note that expires in 2 seconds" \
  memlane set demo/user/42 scratch.otp 493817 --ttl 2
sleep 2.1
step "After its TTL it is missing, before any cleanup" \
  bash -c 'memlane get demo/user/42 scratch.otp || true'
step "Cleanup removes expired rows physically" \
  memlane cleanup

# facts, claims and sources: a fresh namespace per run, so reruns never make duplicates
ns="demo/facts/run-$(date +%s)"
id() { python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'; }
ravi=$(memlane entity add "$ns" Ravi --kind person --profile "billing engineer" --json | id)
memlane entity add "$ns" Ravi --kind person --profile "designer in Lisbon" >/dev/null
billing=$(memlane entity add "$ns" "Billing migration" --kind project --json | id)
for n in 1 2 3; do memlane fact assert "$ns" "$ravi" "works on" "$billing" --source "note:$n" >/dev/null; done
march=$(memlane fact assert "$ns" "$billing" "cutover date" 2026-03-01 --string --json | id)
memlane fact assert "$ns" "$billing" "cutover date" 2026-04-15 --string --supersedes "$march" >/dev/null
step "Which Ravi? Two entities share the name; what tells them apart" \
  memlane entity resolve Ravi --prefix "$ns"
step "What is true: three notes are one fact with evidence 3; the moved date replaced the old one" \
  memlane fact context "what is Ravi working on" --entity "$ravi" --prefix "$ns"
step "Stats" \
  memlane stats
