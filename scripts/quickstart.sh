#!/usr/bin/env bash
# `make run`: start hookgate on examples/quickstart.json5 and print ready-to-paste curl commands.
set -euo pipefail
cd "$(dirname "$0")/.."
SECRETS=examples/.quickstart-secrets.json
HG=.venv/bin/hookgate
if [ ! -f "$SECRETS" ]; then
  umask 077
  printf '{"hooksToken":"%s","demoRouteSecret":"%s"}\n' "$($HG token generate)" "$($HG token generate)" > "$SECRETS"
  echo "generated quick-start secrets in $SECRETS"
fi
read_secret() { .venv/bin/python -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$SECRETS" "$1"; }
TOKEN=$(read_secret hooksToken)
mkdir -p var
PORT=${HOOKGATE_PORT:-18789}
BASE=http://127.0.0.1:$PORT
cat <<MSG

Try it (in another terminal):

  # queue a system event for the main session and wake the assistant now
  curl -sS -X POST $BASE/hooks/wake -H 'Authorization: Bearer $TOKEN' \\
       -H 'Content-Type: application/json' -d '{"text":"Deploy finished","mode":"now"}'

  # start an isolated agent run (echo agent); its reply is delivered to the console channel here
  curl -sS -X POST $BASE/hooks/agent -H 'Authorization: Bearer $TOKEN' \\
       -H 'Content-Type: application/json' \\
       -d '{"message":"Summarise the deploy","name":"Deploy","channel":"console","to":"you"}'

  # readiness and metrics
  curl -sS $BASE/readyz ; curl -sS $BASE/metrics | grep ^hookgate_requests

  # what was queued and run (works while the server runs; the heartbeat consumed the wake)
  $HG --config examples/quickstart.json5 events list --status all
  $HG --config examples/quickstart.json5 runs list

MSG
exec $HG serve --config examples/quickstart.json5 --port "$PORT" --log-format console
