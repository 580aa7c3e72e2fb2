#!/usr/bin/env bash
# A guided tour of memlane through its CLI, on ./memlane.db (or $MEMLANE_DB), readable in an 80-column log:
# each step says what it teaches, then shows the command (as it can be pasted back) and its answer.
set -euo pipefail
# shown ARGS...: the command as it can be pasted back into a shell (single quotes where needed), folded
# with a trailing backslash where it would pass 78 columns
shown() {
  local out=() arg line="" word
  for arg in "$@"; do
    if [[ $arg =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then out+=("$arg"); else out+=("'${arg//\'/\'\\\'\'}'"); fi
  done
  for word in "${out[@]}"; do
    if [[ -n $line && $(( ${#line} + ${#word} + 1 )) -gt 76 ]]; then
      printf '%s \\\n  ' "$line"
      line=$word
    else
      line=${line:+$line }$word
    fi
  done
  printf '%s' "$line"
}
# step TITLE LESSON COMMAND...: a numbered step, its lesson wrapped at 78 columns, the command, its answer
n=0
step() {
  n=$((n + 1))
  printf '\n\033[1m== %d. %s\033[0m\n' "$n" "$1"
  printf '%s\n' "$2" | fold -s -w 78
  printf '$ %s\n' "$(shown "${@:3}")"
  "${@:3}"
}

memlane clear demo --yes >/dev/null
step "Write typed values at addresses" \
  "An address is a namespace (user/42) and a key; dotted keys form a taxonomy. Values keep their JSON type: 14 is a number, 3.12 --string a string." \
  memlane put demo/user/42 preferences.ui.theme dark
memlane put demo/user/42 preferences.ui.font-size 14 >/dev/null
memlane put demo/user/42 preferences.editor '{"name": "helix", "tabs": 4}' >/dev/null
memlane put demo/user/42 version 3.12 --string >/dev/null
memlane put demo/room/eng session-digest "Ships Friday." >/dev/null
memlane put demo/room/eng chat.1 "the digest bot posted the session digest again" >/dev/null
memlane put demo/room/eng chat.2 "session notes: digest the session digest" >/dev/null
step "Exact lookup: the agent knows the address" \
  "No ranking and no index: the same address gives the same answer every time." \
  memlane get demo/user/42 preferences.editor --value
step "The taxonomy map an agent reads before it reads items" \
  "summarize counts the keys under each path without reading values: an agent drills down with --key-prefix and a larger --depth." \
  memlane summarize demo --depth 2
step "List a namespace in address order" \
  "Items come back in (namespace, key) order, a page at a time (--cursor)." \
  memlane list demo/user/42 --key-prefix preferences.ui
step "Search by topic, when the agent does not know the address" \
  "Full text (BM25) and vectors, fused and checked against the live rows. Chatty notes that repeat the words outrank the digest the agent wants..." \
  memlane search "session digest" --prefix demo --limit 3
step "... so when the agent knows the key, it recalls by key" \
  "The keyed recall: every item filed under exactly that key, in any namespace, newest first. Exact, so the digest comes back however chatty the notes." \
  memlane recall --key session-digest --prefix demo
step "Replace a value: the old version goes to history" \
  "Writing an existing address replaces it (version 2); nothing is lost." \
  memlane put demo/user/42 preferences.ui.theme light
step "History of that address" \
  "Who changed it, when, and what it was before." \
  memlane history demo/user/42 preferences.ui.theme
step "A note that expires in 2 seconds" \
  "--ttl sets an expiry: from that instant every read treats the item as missing." \
  memlane put demo/user/42 scratch.otp 493817 --ttl 2
sleep 2.1
step "After its TTL it is missing, before any cleanup" \
  "Expiry is logical and immediate; the row is still on disk until cleanup." \
  bash -c 'memlane get demo/user/42 scratch.otp || true'
step "Cleanup removes expired rows physically" \
  "cleanup deletes what already expired (and history past the retention rules)." \
  memlane cleanup

# facts, claims and sources: a fresh namespace per run, so reruns never make duplicates
ns="demo/f$(date +%s)"
id() { python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'; }
ravi=$(memlane entity add "$ns" Ravi --kind person --profile "billing" --json | id)
memlane entity add "$ns" Ravi --kind person --profile "design" >/dev/null
billing=$(memlane entity add "$ns" Billing --kind project --json | id)
for note in 1 2 3; do memlane fact assert "$ns" "$ravi" "works on" "$billing" --source "note:$note" >/dev/null; done
march=$(memlane fact assert "$ns" "$billing" "cutover" 2026-03-01 --string --json | id)
memlane fact assert "$ns" "$billing" "cutover" 2026-04-15 --string --supersedes "$march" >/dev/null
step "Which Ravi? Two entities share the name" \
  "resolve does not guess: it says the name is ambiguous and what tells the two apart (their profiles and facts)." \
  memlane entity resolve Ravi --prefix "$ns"
step "What is true about Ravi's work" \
  "Three notes saying the same thing are one fact with evidence 3; the moved cutover date replaced the old one." \
  memlane fact context "what is Ravi working on" --entity "$ravi"
step "Stats" \
  "What the store holds: items, history, vectors (made by the embedder it records)." \
  memlane stats
