#!/usr/bin/env bash
# The manager's approval in `make demo`: it runs `nova dev` in the
# background, starts examples/invoice-routing.yaml on it with the built-in
# sample invoice (1500 EUR, above the threshold), shows the execution waiting
# at the wait node manager_approval, approves the invoice with `nova signal`,
# and prints the outcome and the chain of work. nova dev is stopped however
# the script ends (an error, Ctrl-C).
#
# Environment:
#   NOVA             the nova binary (default bin/nova)
#   DEMO_DIR         nova dev's data dir is $DEMO_DIR/dev, its log
#                    $DEMO_DIR/nova-dev.log (default .nova/demo)
#   DEMO_NATS_PORT   nova dev's NATS port (default 0: a free port)
#   DEMO_MONGO_PORT  nova dev's MongoDB wire protocol port (default 0: a free
#                    port)
set -euo pipefail

nova=${NOVA:-bin/nova}
demo_dir=${DEMO_DIR:-.nova/demo}
nats_port=${DEMO_NATS_PORT:-0}
mongo_port=${DEMO_MONGO_PORT:-0}
log=$demo_dir/nova-dev.log
workflow=examples/invoice-routing.yaml
out=$(mktemp -d)

# show prints a command the way a reader would type it, then runs it.
show() {
	echo "\$ $*"
	"$@"
}

mkdir -p "$demo_dir"
echo "\$ $nova dev --data-dir $demo_dir/dev --nats-port $nats_port --mongo-port $mongo_port --gateway-addr off > $log 2>&1 &"
# Its own embedded servers, whatever NATS_URL and MONGODB_URI say.
env -u NATS_URL -u MONGODB_URI "$nova" dev --data-dir "$demo_dir/dev" --nats-port "$nats_port" \
	--mongo-port "$mongo_port" --gateway-addr off >"$log" 2>&1 &
dev=$!

# stop_dev stops nova dev (SIGTERM, as Ctrl-C would) and waits for it, at
# most 30 s before it kills it.
stop_dev() {
	kill -TERM "$dev" 2>/dev/null || return 0
	for _ in $(seq 300); do
		kill -0 "$dev" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$dev" 2>/dev/null || true
	wait "$dev" 2>/dev/null || true
}
trap 'stop_dev; rm -rf -- "$out"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# nova dev prints "NOVA dev server running" once every service is up.
for i in $(seq 600); do
	grep -q '^NOVA dev server running' "$log" && break
	if ! kill -0 "$dev" 2>/dev/null || [ "$i" = 600 ]; then
		echo "approval-demo: nova dev did not start; its log ($log):" >&2
		cat "$log" >&2
		echo "approval-demo: when a port is taken, pick others: make demo DEMO_NATS_PORT=24222 DEMO_MONGO_PORT=27028 (0: a free one)" >&2
		exit 1
	fi
	sleep 0.1
done
NATS_URL=$(sed -n 's/^ *NATS_URL=//p' "$log")
MONGODB_URI=$(sed -n 's/^ *MONGODB_URI=//p' "$log")
export NATS_URL MONGODB_URI
echo "nova dev is running; the commands below reach it with"
echo "\$ export NATS_URL=$NATS_URL MONGODB_URI=$MONGODB_URI"
echo

echo "\$ $nova run $workflow --remote --detach"
id=$("$nova" run "$workflow" --remote --detach)
echo "$id"
echo

# Follow the execution until it has reached the wait node (the first
# nodes run in the sandbox; on a slow machine that may take a few tries).
for i in $(seq 20); do
	if "$nova" watch "$id" --timeout 3s >"$out/watch" 2>"$out/watch.err"; then
		cat "$out/watch" "$out/watch.err"
		echo "approval-demo: the execution ended without waiting for the manager" >&2
		exit 1
	fi
	if ! grep -q 'deadline exceeded' "$out/watch.err"; then
		cat "$out/watch" "$out/watch.err"
		exit 1
	fi
	grep -q '▶ manager_approval *started' "$out/watch" && break
	if [ "$i" = 20 ]; then
		cat "$out/watch"
		echo "approval-demo: the execution did not reach manager_approval within a minute" >&2
		exit 1
	fi
done
echo "\$ $nova watch $id --timeout 3s"
cat "$out/watch"
echo "... still running after 3s: manager_approval waits for the signal \"approval\" (for up to 72h)"
echo

# The engine stores that the execution waits a moment after it announced
# the wait node; nova signal refuses a signal until then.
echo "\$ $nova signal $id approval --set approved=true --set reviewed_by=manager_1"
for i in $(seq 50); do
	status=0
	"$nova" signal "$id" approval --set approved=true --set reviewed_by=manager_1 2>"$out/signal.err" || status=$?
	[ "$status" = 0 ] && break
	if [ "$status" != 2 ] || ! grep -q 'waits for no signal' "$out/signal.err" || [ "$i" = 50 ]; then
		cat "$out/signal.err" >&2
		exit 1
	fi
	sleep 0.1
done
echo

show "$nova" watch "$id"

# The audit service stores the end of the execution a moment after it.
for i in $(seq 50); do
	"$nova" chain "$id" >"$out/chain" 2>&1 && ! grep -q '^chain of work of .*, running' "$out/chain" && break
	if [ "$i" = 50 ]; then
		cat "$out/chain"
		exit 1
	fi
	sleep 0.2
done
# The final context, as nova run prints it.
echo
echo "the final context (execution.final_context of nova chain $id --json):"
"$nova" chain "$id" --json | python3 -c '
import json, sys
context = json.load(sys.stdin)["execution"].get("final_context", {})
print("context    " + json.dumps(context, indent=2, sort_keys=True).replace("\n", "\n           "))'
echo
echo "\$ $nova chain $id"
cat "$out/chain"
echo
echo "stopping nova dev (its data stays in $demo_dir/dev)"
