#!/usr/bin/env bash
# `make run`: start hookgate on examples/quickstart.json5 and print ready-to-paste curl commands.
set -euo pipefail
cd "$(dirname "$0")/.."
ENV_FILE=examples/.quickstart.env
if [ ! -f "$ENV_FILE" ]; then
  umask 077
  {
    echo "HOOKGATE_HOOKS_TOKEN=$(.venv/bin/hookgate token generate)"
    echo "HOOKGATE_DEMO_ROUTE_SECRET=$(.venv/bin/hookgate token generate)"
  } > "$ENV_FILE"
  echo "generated quick-start tokens in $ENV_FILE"
fi
set -a; . "./$ENV_FILE"; set +a
mkdir -p var
BASE=http://127.0.0.1:18789
cat <<MSG

Try it (in another terminal):

  # queue a system event for the main session and wake the assistant now
  curl -sS -X POST $BASE/hooks/wake -H 'Authorization: Bearer $HOOKGATE_HOOKS_TOKEN' \\
       -H 'Content-Type: application/json' -d '{"text":"Deploy finished","mode":"now"}'

  # start an isolated agent run (echo agent) and get its runId
  curl -sS -X POST $BASE/hooks/agent -H 'Authorization: Bearer $HOOKGATE_HOOKS_TOKEN' \\
       -H 'Content-Type: application/json' -d '{"message":"Summarise the deploy","name":"Deploy"}'

  # health, readiness and metrics
  curl -sS $BASE/readyz ; curl -sS $BASE/metrics | head

  # inspect what was queued
  .venv/bin/hookgate --config examples/quickstart.json5 events list
  .venv/bin/hookgate --config examples/quickstart.json5 runs list

MSG
exec .venv/bin/hookgate serve --config examples/quickstart.json5 --log-format console
