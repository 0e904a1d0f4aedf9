// Package jsrunner runs a node's JavaScript in isolation with bubblewrap, with the
// semantics of POST /v1/execute: code that exports a function, returns a
// value or is an async IIFE; console output captured as logs; the result, its
// array form (items), the error and its stack reported.
//
// # Isolation
//
// The same as the Python runner's, from package isolation: new user, pid, mount,
// ipc, uts, cgroup and network namespaces, capabilities dropped, a cleared
// environment, /usr and the public parts of /etc read-only, a private
// /tmp per execution (a tmpfs of Config.DiskBytes), the sandbox started as uid
// 65534 when the service is root, and on timeout the sandbox's pid 1 killed
// through a pidfd, which ends every process of the run. Limits are set with
// prlimit before node starts: RLIMIT_DATA (Config.MemoryBytes), RLIMIT_FSIZE,
// RLIMIT_NPROC, RLIMIT_CPU and no core files. Memory is limited with RLIMIT_DATA and node's --max-old-space-size,
// not RLIMIT_AS: V8 reserves large ranges of address space (WebAssembly memories
// reserve 10 GiB, and Node's own fetch compiles WebAssembly), so an address-space
// limit breaks node long before it limits memory, while RLIMIT_DATA counts only
// memory the process can write. The JavaScript heap gets three quarters of
// MemoryBytes; running past it aborts node ("JavaScript heap out of memory"),
// and buffers past RLIMIT_DATA fail with a RangeError: both are reported as the
// "memory" limit. require('child_process') is not blocked (a require hook is
// no boundary); what it starts runs in the same sandbox, sees nothing of the host
// and dies with it.
//
// # Network
//
// A sandbox never shares the host's network. With Request.Network the run gets
// a Unix socket of its own (/nova-net/egress.sock), served by the egress proxy
// with the policy of Config.EgressAllow and Request.AllowHosts; runner.js sends
// the http and https modules' global agents (and so axios) and fetch through it
// as CONNECT tunnels. A host outside the policy is refused with an error naming
// it (code EACCES). Raw sockets (net.connect) and child processes have no way
// out.
//
// # Protocol
//
// A fixed runner (runner.js, embedded) reads the code from /nova/code.js and the
// context from /nova/context.json, so code and data never meet as text. It
// writes "S" and then its report (one JSON document and a newline) to fd 3, and
// every console call as one JSON string per line to fd 4, written synchronously
// so that the logs of a run that was killed are kept. What the code writes to
// process.stdout or process.stderr, and what its child processes print, is
// Result.Stdout and Result.Stderr; console output is only in Result.Logs
// (console.warn entries start with "[warn] ", console.error and console.trace
// with "[error] ").
//
// # Which value the code gives
//
// The code runs as a script when it compiles as one, else as the body of an async
// function (top-level return and await), else, when it uses import or export, as
// an ES module. The value (Result.Value) is, in this order:
//   - the result of the exported function, called with the context and awaited:
//     module.exports = async (args) => ..., exports.default = ..., or an ES
//     module's export default function;
//   - the returned value (top-level return), awaited;
//   - an exported value that is not a function (module.exports = data, export
//     default data);
//   - in a script, the value of the last statement when it is a promise (an async
//     IIFE, main()), awaited, or when the script ends with an IIFE.
//
// Code that gives no value (say `context.x = 1`, or callbacks with no promise)
// ends like `node code.js` does: when nothing is left to run. Code that gives a
// value ends when the value is settled; work it did not await is cut off. A timer
// that never stops keeps such a script running into its timeout.
//
// Result.Items is the value when it is an array, else the value wrapped in an
// array; no value gives no items.
//
// # Context and updates
//
// The context is the global `context`, and the exported function's argument is
// the same object. The updates are the keys whose values differ after the run
// (a deep compare of the JSON values, as for Python); Deleted lists keys removed
// or set to undefined. When the code changed nothing in the context and its value
// is a plain object, the object's keys are the updates: `return {total: 3}` and
// `context.total = 3` have the same effect. Other values (arrays, primitives)
// only travel in Value and Items.
//
// Values are converted as JSON.stringify would (Dates become strings, undefined
// properties are left out), but what JSON would lose or cannot hold is a
// code_error naming each place: functions, BigInt, symbols, NaN and Infinity,
// Map, Set, promises, typed arrays and circular references.
//
// process.exit() does not end the process before the report: it stops the code,
// and the result says the code exited (Result.Exited, Result.ExitCode). Exit code
// 0 is a success with the context as the code left it; any other is a code_error.
package jsrunner
