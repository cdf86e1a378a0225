#!/usr/bin/env bash
# A shell-driven agent graded outside pytest: start a graded session, let the agent's calls
# be recorded into it, end it with a gate. The exit status is the gate's: 0 at or above
# FAIL_UNDER, 1 below it (2 for a usage or input error).
#
#   usage: bash examples/shell/graded_agent.sh [FAIL_UNDER]    (default: B)
#
# Run it in a scratch directory: the audit store and the history go to ./.cleo/ (or where
# CLEO_AUDIT_DB and --history say). CI runs it: tests/cli/test_session_cmd.py.
set -euo pipefail

fail_under="${1:-B}"

# Sets CLEO_SESSION_GRADE, CLEO_SESSION_GRADE_ID, CLEO_SESSION_ID and CLEO_AUDIT_DB here, so
# every process started from now on (the agent, its tools) records into the session. Assigned
# first: `set -e` stops at a start that failed, which `eval "$(...)"` alone would not (an
# eval of nothing succeeds).
session="$(cleo-grade session start --grade --scope epic:T001 --name "shell agent")"
eval "$session"

# The agent's calls, one `cleo-grade record` each (an agent in another language writes the
# same rows through its own SQLite client, or exports OTLP spans).
cleo-grade record session list --gateway cleo_query
cleo-grade record tasks find --params '{"query": "login"}' --gateway cleo_query
cleo-grade record tasks show --params '{"taskId": "T9"}' --exit-code 4 \
  --error "Task T9 not found" --gateway cleo_query
cleo-grade record tasks exists --params '{"taskId": "T9"}' --gateway cleo_query
cleo-grade record tasks add --gateway cleo_mutate \
  --params '{"title": "Fix login", "description": "Users cannot log in after the update"}'
cleo-grade record session end --gateway cleo_mutate

# Grade the session into the history; below the threshold this exits 1.
cleo-grade session end --fail-under "$fail_under"
