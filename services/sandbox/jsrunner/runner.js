'use strict';
// NOVA JavaScript runner: runs one node's code inside bubblewrap.
//
// Started by the Go package jsrunner as
// `node [flags] /nova/runner.js MAX_LOG_BYTES closed|network` with the code in /nova/code.js (and the same file as /nova/code.mjs, for ES
// modules) and the context in /nova/context.json. Console output goes to fd 4 as
// one JSON string per line, written synchronously so that it survives a kill. The
// result goes to fd 3 as "S" (written when the code is about to run) followed by
// one JSON document and a newline, so nothing the code prints can corrupt it.
// See the package documentation for the rules that turn code into a result.

const fs = require('fs');
const vm = require('vm');
const util = require('util');
const { createRequire } = require('module');
const { pathToFileURL } = require('url');

const RESULT_FD = 3;
const LOG_FD = 4;
const DIR = '/nova';
const CODE = DIR + '/code.js';
const CODE_MJS = DIR + '/code.mjs';
const CONTEXT = DIR + '/context.json';
const MAX_PROBLEMS = 10;
const MAX_DEPTH = 500;

// What the runner relies on, taken before the code can replace it.
const stringify = JSON.stringify;
const parse = JSON.parse;
const writeSync = fs.writeSync;
const readFileSync = fs.readFileSync;
const reallyExit = process.reallyExit.bind(process);
const inspect = util.inspect;
const types = util.types;
const objectKeys = Object.keys;
const getPrototypeOf = Object.getPrototypeOf;
const isArray = Array.isArray;
const hasOwn = (o, k) => Object.prototype.hasOwnProperty.call(o, k);
const ObjectProto = Object.prototype;
const bufferFrom = Buffer.from;
const byteLength = Buffer.byteLength;
const SafeSet = Set;
const isFiniteNumber = Number.isFinite;
const sleepCell = new Int32Array(new SharedArrayBuffer(4));

function writeAll(fd, text) {
  let buf = bufferFrom(text, 'utf8');
  while (buf.length > 0) {
    let n;
    try {
      n = writeSync(fd, buf);
    } catch (e) {
      if (e && e.code === 'EAGAIN') {
        Atomics.wait(sleepCell, 0, 0, 1);
        continue;
      }
      throw e;
    }
    buf = buf.subarray(n);
  }
}

// Console: every call becomes one log entry on fd 4, capped at MAX_LOG_BYTES.
const maxLogBytes = Number(process.argv[2]) || 1 << 20;
let logBytes = 0;
let logsDropped = 0;

function emitLog(text) {
  const size = byteLength(text, 'utf8');
  const room = maxLogBytes - logBytes;
  if (room <= 0) {
    logsDropped += size;
    return;
  }
  if (size > room) {
    text = bufferFrom(text, 'utf8').subarray(0, room).toString('utf8');
    logsDropped += size - room;
  }
  logBytes += Math.min(size, room);
  try {
    writeAll(LOG_FD, stringify(text) + '\n');
  } catch (e) {
    // The log pipe is gone (the code closed fd 4): keep running without logs.
  }
}

function sink(prefix) {
  return {
    write(chunk) {
      let s = String(chunk);
      if (s.endsWith('\n')) s = s.slice(0, -1);
      emitLog(prefix + s);
      return true;
    },
  };
}

function installConsole() {
  const opts = { ignoreErrors: false, colorMode: false };
  const main = new console.Console({ stdout: sink(''), stderr: sink('[error] '), ...opts });
  const warn = new console.Console({ stdout: sink('[warn] '), stderr: sink('[warn] '), ...opts });
  main.warn = warn.warn;
  Object.defineProperty(globalThis, 'console', { value: main, writable: true, configurable: true, enumerable: false });
}

// process.exit must not end the process before the runner reports: it stops the
// code by throwing, and the report says that the code exited.
class ExitSignal extends Error {
  constructor(code) {
    super('process.exit(' + code + ') called');
    this.name = 'ProcessExit';
    this.exitCode = code;
  }
}
let exitRequest = null;

function installExit() {
  const exit = function exit(code) {
    if (code === undefined) code = process.exitCode;
    const n = Number(code);
    exitRequest = { code: Number.isInteger(n) ? n : code === undefined || code === null ? 0 : 1 };
    throw new ExitSignal(exitRequest.code);
  };
  process.exit = exit;
  process.reallyExit = exit;
}

// axios and cheerio are also globals, loaded on first use.
function lazyGlobal(name, load) {
  Object.defineProperty(globalThis, name, {
    configurable: true,
    enumerable: false,
    get() {
      const value = load();
      Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
      return value;
    },
    set(value) {
      Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
    },
  });
}

// ---- network --------------------------------------------------------------------

// With network, the only way out is the service's egress proxy, reached through
// a socket the service serves for this run alone: every connection is a CONNECT
// tunnel that the proxy opens only to the node's allowed hosts. The http and
// https modules (and so axios) use it through their global agents, fetch through
// an undici proxy dispatcher.
const EGRESS_SOCKET = '/nova-net/egress.sock';

function tunnel(host, port, callback) {
  const net = require('net');
  const target = (net.isIPv6(host) ? '[' + host + ']' : host) + ':' + port;
  const sock = net.connect({ path: EGRESS_SOCKET });
  let head = Buffer.alloc(0);
  let done = false;
  const finish = (err, s) => {
    if (done) return;
    done = true;
    callback(err, s);
  };
  sock.once('error', (e) => finish(e));
  sock.on('connect', () => sock.write('CONNECT ' + target + ' HTTP/1.1\r\nHost: ' + target + '\r\n\r\n'));
  const onData = (chunk) => {
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) return;
    const status = /^HTTP\/1\.[01] (\d{3})/.exec(head.toString('latin1', 0, end));
    if (status && status[1] === '200') {
      sock.removeListener('data', onData);
      sock.pause();
      if (head.length > end + 4) sock.unshift(head.subarray(end + 4));
      finish(null, sock);
      return;
    }
    // A refusal: the proxy explains it in the body and closes.
    sock.removeListener('data', onData);
    let body = head.subarray(end + 4);
    sock.on('data', (c) => { body = Buffer.concat([body, c]); });
    sock.once('close', () => {
      const code = status ? Number(status[1]) : 0;
      const e = new Error('network access to ' + target + ' refused: ' + (body.toString('utf8').trim() || 'status ' + code));
      e.code = code === 403 ? 'EACCES' : 'EHOSTUNREACH';
      finish(e);
    });
  };
  sock.on('data', onData);
}

function installEgress() {
  const http = require('http');
  const https = require('https');
  const tls = require('tls');
  const net = require('net');
  class TunnelAgent extends http.Agent {
    createConnection(options, callback) {
      tunnel(options.host, options.port || 80, (err, sock) => {
        callback(err, sock);
        // HTTP speaks first from the client: nothing arrives before the
        // request, whose listeners the client installs on the next tick.
        if (sock) sock.resume();
      });
    }
  }
  class TLSTunnelAgent extends https.Agent {
    createConnection(options, callback) {
      tunnel(options.host, options.port || 443, (err, sock) => {
        if (err) return callback(err);
        const servername = options.servername || (net.isIP(options.host) ? undefined : options.host);
        callback(null, tls.connect({ ...options, socket: sock, servername }));
      });
    }
  }
  http.globalAgent = new TunnelAgent({ keepAlive: true });
  https.globalAgent = new TLSTunnelAgent({ keepAlive: true });
  // fetch goes through undici's global dispatcher, installed on first use.
  const builtinFetch = globalThis.fetch;
  if (typeof builtinFetch === 'function') {
    let ready = false;
    const fetchThroughEgress = function fetch(...args) {
      if (!ready) {
        const undici = require('/nova/node_modules/undici');
        undici.setGlobalDispatcher(
          new undici.ProxyAgent({
            uri: 'http://nova-egress',
            clientFactory: (origin, opts) => new undici.Pool(origin, { ...opts, connect: undici.buildConnector({ socketPath: EGRESS_SOCKET }) }),
          }),
        );
        ready = true;
      }
      return builtinFetch.apply(this, args);
    };
    Object.defineProperty(globalThis, 'fetch', { value: fetchThroughEgress, writable: true, configurable: true, enumerable: true });
  }
}

// ---- turning values into JSON ------------------------------------------------

function describeType(v) {
  if (typeof v === 'function') return 'function';
  if (typeof v === 'bigint') return 'BigInt';
  if (typeof v === 'symbol') return 'Symbol';
  if (typeof v === 'number') return String(v);
  if (types.isMap(v)) return 'Map';
  if (types.isSet(v)) return 'Set';
  if (types.isWeakMap(v)) return 'WeakMap';
  if (types.isWeakSet(v)) return 'WeakSet';
  if (types.isPromise(v)) return 'Promise: await it';
  if (types.isTypedArray(v) || types.isAnyArrayBuffer(v)) return 'binary data: convert it with Array.from or to a string';
  if (types.isNativeError(v)) return 'Error: use its message';
  return null;
}

// toPlain returns a JSON value equal to what JSON.stringify would write, and
// records a problem for everything that JSON would silently lose or cannot hold:
// functions, BigInt, symbols, NaN and Infinity, Map, Set, promises, cycles.
function toPlain(v, path, problems, ancestors, depth) {
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return v;
  if (v === undefined) return undefined;
  if (typeof v === 'number') {
    if (isFiniteNumber(v)) return v;
    problems.push(path + ' (' + v + ')');
    return null;
  }
  if (typeof v !== 'object') {
    problems.push(path + ' (' + describeType(v) + ')');
    return null;
  }
  if (typeof v.toJSON === 'function' && !isArray(v)) {
    let j;
    try {
      j = v.toJSON();
    } catch (e) {
      problems.push(path + ' (toJSON failed: ' + describe(e) + ')');
      return null;
    }
    if (j !== v) return toPlain(j, path, problems, ancestors, depth);
  }
  const bad = describeType(v);
  if (bad) {
    problems.push(path + ' (' + bad + ')');
    return null;
  }
  if (ancestors.has(v)) {
    problems.push(path + ' (circular reference)');
    return null;
  }
  if (depth > MAX_DEPTH) {
    problems.push(path + ' (nested too deeply)');
    return null;
  }
  ancestors.add(v);
  let out;
  if (isArray(v)) {
    out = new Array(v.length);
    for (let i = 0; i < v.length; i++) {
      const p = toPlain(v[i], path + '[' + i + ']', problems, ancestors, depth + 1);
      out[i] = p === undefined ? null : p;
      if (problems.length >= MAX_PROBLEMS) break;
    }
  } else {
    out = {};
    for (const k of objectKeys(v)) {
      const p = toPlain(v[k], path + '.' + k, problems, ancestors, depth + 1);
      if (p !== undefined) out[k] = p;
      if (problems.length >= MAX_PROBLEMS) break;
    }
  }
  ancestors.delete(v);
  return out;
}

function isPlainObject(v) {
  if (v === null || typeof v !== 'object' || isArray(v)) return false;
  const proto = getPrototypeOf(v);
  return proto === null || proto === ObjectProto;
}

function same(a, b) {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
  if (isArray(a) !== isArray(b)) return false;
  if (isArray(a)) {
    if (a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!same(a[i], b[i])) return false;
    return true;
  }
  const ka = objectKeys(a);
  if (ka.length !== objectKeys(b).length) return false;
  for (const k of ka) if (!hasOwn(b, k) || !same(a[k], b[k])) return false;
  return true;
}

// ---- errors -------------------------------------------------------------------

function describe(e) {
  if (e instanceof ExitSignal) return e.message;
  if (e !== null && typeof e === 'object' && typeof e.message === 'string') {
    const name = typeof e.name === 'string' && e.name ? e.name : 'Error';
    return e.message ? name + ': ' + e.message : name;
  }
  try {
    return 'Uncaught ' + inspect(e, { depth: 2, breakLength: Infinity });
  } catch (_) {
    return 'Uncaught exception';
  }
}

// userStack keeps the frames of the code and the modules it used.
function userStack(e) {
  let stack;
  try {
    stack = e !== null && typeof e === 'object' ? e.stack : undefined;
  } catch (_) {
    stack = undefined;
  }
  if (typeof stack !== 'string') return '';
  return stack
    .split('\n')
    .filter((l) => !(/^\s+at /.test(l) && (l.includes('/nova/runner.js') || l.includes('node:internal/') || l.includes('node:vm'))))
    .join('\n');
}

function errorReport(e) {
  let message = describe(e);
  const stack = userStack(e);
  if (e instanceof SyntaxError) {
    // V8 puts "file:line" on the first line of a compile error's stack.
    const m = /^(\/nova\/code\.m?js):(\d+)/.exec(stack);
    if (m) message += ' (line ' + m[2] + ')';
  }
  const rep = { status: 'error', error_kind: 'code_error', error: message, stack };
  if (e instanceof RangeError && /Array buffer allocation failed/.test(String(e.message))) {
    rep.error_kind = 'limit';
    rep.limit = 'memory';
  } else if (e !== null && typeof e === 'object' && e.code === 'EFBIG') {
    rep.error_kind = 'limit';
    rep.limit = 'file_size';
  } else if (e !== null && typeof e === 'object' && e.code === 'ENOSPC') {
    rep.error_kind = 'limit';
    rep.limit = 'disk';
  }
  return rep;
}

// ---- the report ---------------------------------------------------------------

let reported = false;

function report(rep) {
  if (reported) return;
  reported = true;
  rep.logs_dropped = logsDropped;
  let text;
  try {
    text = stringify(rep);
  } catch (e) {
    const tooBig = /Invalid string length|allocation/i.test(String(e && e.message));
    text = stringify({
      status: 'error',
      error_kind: tooBig ? 'limit' : 'sandbox_fault',
      limit: tooBig ? 'output' : undefined,
      error: 'result could not be encoded: ' + describe(e),
      logs_dropped: logsDropped,
    });
  }
  // What the code wrote to process.stdout or stderr may still wait in their
  // buffers (a full pipe makes Node queue): it goes out before the process ends.
  const pending = [];
  for (const name of ['stdout', 'stderr']) {
    const stream = stdioStreams[name];
    if (stream && stream.writableLength > 0) pending.push(new Promise((resolve) => stream.write('', resolve)));
  }
  const end = () => {
    try {
      writeAll(RESULT_FD, text + '\n');
    } finally {
      reallyExit(0);
    }
  };
  if (pending.length === 0) end();
  else Promise.all(pending).then(end, end);
}

// process.stdout and stderr are created on first use; the runner remembers
// those the code used, so that replacing them does not hide their buffers.
const stdioStreams = {};
for (const name of ['stdout', 'stderr']) {
  const desc = Object.getOwnPropertyDescriptor(process, name);
  if (!desc || typeof desc.get !== 'function') continue;
  Object.defineProperty(process, name, {
    configurable: true,
    enumerable: desc.enumerable,
    get() {
      const stream = desc.get.call(process);
      stdioStreams[name] = stream;
      Object.defineProperty(process, name, { value: stream, writable: true, configurable: true, enumerable: desc.enumerable });
      return stream;
    },
  });
}

// finish turns the final state into the report: the context diff, the value,
// and the rule that a returned plain object is the updates when the context
// was left alone.
function finish(outcome) {
  if (exitRequest !== null) {
    if (exitRequest.code !== 0) {
      report({ status: 'error', error_kind: 'code_error', error: 'process.exit(' + exitRequest.code + ') called', exited: true, exit_code: exitRequest.code });
      return;
    }
    outcome = { hasValue: false };
  }
  const after = globalThis.context;
  if (!isPlainObject(after)) {
    report({ status: 'error', error_kind: 'code_error', error: 'context must be a plain object, got ' + (after === null ? 'null' : isArray(after) ? 'an array' : typeof after) });
    return;
  }
  const problems = [];
  const updates = {};
  const deleted = [];
  for (const k of objectKeys(after)) {
    const v = toPlain(after[k], 'context.' + k, problems, new SafeSet(), 0);
    if (v === undefined) continue;
    if (hasOwn(before, k) && same(v, before[k])) continue;
    updates[k] = v;
  }
  for (const k of objectKeys(before)) {
    if (!hasOwn(after, k) || after[k] === undefined) deleted.push(k);
  }
  if (problems.length > 0) {
    report({ status: 'error', error_kind: 'code_error', error: 'context values are not JSON-serializable: ' + problems.slice(0, MAX_PROBLEMS).join(', ') });
    return;
  }
  const rep = { status: 'success', updates, deleted };
  if (outcome.hasValue && outcome.value !== undefined) {
    const value = toPlain(outcome.value, 'result', problems, new SafeSet(), 0);
    if (problems.length > 0) {
      report({ status: 'error', error_kind: 'code_error', error: 'the returned value is not JSON-serializable: ' + problems.slice(0, MAX_PROBLEMS).join(', ') });
      return;
    }
    rep.has_value = true;
    rep.value = value;
    if (objectKeys(updates).length === 0 && deleted.length === 0 && isPlainObject(outcome.value)) {
      rep.updates = value;
    }
  }
  if (exitRequest !== null) {
    rep.exited = true;
    rep.exit_code = 0;
  }
  report(rep);
}

function fail(e) {
  if (!started) {
    report({ status: 'error', error_kind: 'sandbox_fault', error: 'runner: ' + describe(e), stack: userStack(e) });
    return;
  }
  if (e instanceof ExitSignal || exitRequest !== null) {
    finish({ hasValue: false });
    return;
  }
  report(errorReport(e));
}

// ---- running the code ---------------------------------------------------------

function isThenable(v) {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function';
}

// endsWithIIFE: the script's last statement calls a function expression, as in
// `(async () => { ... })();` or `(function () { ... }())`.
function endsWithIIFE(src) {
  let s = src;
  for (;;) {
    const t = s.replace(/[\s;]+$/, '');
    const lineStart = t.lastIndexOf('\n') + 1;
    const lastLine = t.slice(lineStart);
    if (lastLine.trim().startsWith('//')) {
      s = t.slice(0, lineStart);
      continue;
    }
    // A comment after the call on the same line: `})(); // run`.
    const trailing = /^(.*[);])\s*\/\/[^'"`]*$/.exec(lastLine);
    if (trailing) {
      s = t.slice(0, lineStart) + trailing[1];
      continue;
    }
    if (t.endsWith('*/') && t.includes('/*')) {
      s = t.slice(0, t.lastIndexOf('/*'));
      continue;
    }
    s = t;
    break;
  }
  return /[)}]\s*\)\s*(\.call\s*)?\([^()]*\)$/.test(s) || /\}\s*\([^()]*\)\s*\)$/.test(s);
}

function looksLikeModule(e) {
  const m = String(e && e.message);
  return m.includes('Cannot use import statement outside a module') || m.includes("Unexpected token 'export'") || m.includes('import.meta');
}

// import() inside the code: Node 20 resolves it like the main program does
// (node_modules beside the code); older versions have no loader for scripts.
const importDynamically = vm.constants && vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER;

// state: "running" until the code gave its value, then "draining" when the run
// ends with the event loop (code that gave no value, like `node code.js`).
let state = 'running';
let started = false;
let before;

async function main() {
  const source = readFileSync(CODE, 'utf8');
  // From here on a failure is the code's (or its context's, which counts against
  // the code's memory limit).
  started = true;
  writeAll(RESULT_FD, 'S');
  const raw = readFileSync(CONTEXT, 'utf8');
  before = parse(raw);
  const context = parse(raw);

  const userRequire = createRequire(CODE);
  const mod = { exports: {}, id: '.', filename: CODE, path: DIR, loaded: false, children: [], paths: userRequire.resolve.paths('x') || [] };
  const initialExports = mod.exports;
  Object.assign(globalThis, { context, module: mod, exports: mod.exports, require: userRequire, __filename: CODE, __dirname: DIR });
  lazyGlobal('axios', () => userRequire('axios'));
  lazyGlobal('cheerio', () => userRequire('cheerio'));
  installConsole();
  installExit();
  if (process.argv[3] === 'network') installEgress();

  let script;
  let mode = 'script';
  try {
    script = new vm.Script(source, { filename: CODE, importModuleDynamically: importDynamically });
  } catch (e) {
    if (!(e instanceof SyntaxError)) throw e;
    try {
      // Top-level return and await: the code as the body of an async function.
      // The header is a line of its own, so line numbers stay those of the code.
      const wrapped = '(async function (exports, require, module, __filename, __dirname) {\n' + source + '\n})';
      script = new vm.Script(wrapped, { filename: CODE, lineOffset: -1, importModuleDynamically: importDynamically });
      mode = 'body';
    } catch (e2) {
      if (!looksLikeModule(e)) throw e2;
      mode = 'module';
    }
  }

  let completion;
  let returned;
  let namespace;
  if (mode === 'script') {
    completion = script.runInThisContext({ displayErrors: true });
  } else if (mode === 'body') {
    const fn = script.runInThisContext({ displayErrors: true });
    returned = await fn.call(mod.exports, mod.exports, userRequire, mod, CODE, DIR);
  } else {
    namespace = await import(pathToFileURL(CODE_MJS).href);
  }

  // Which value the code gave, in order: an exported function's result, a
  // returned value, an exported value, a promise or IIFE the script ended with.
  let exported = mode === 'module' ? namespace.default : mod.exports;
  if (mode !== 'module' && typeof exported !== 'function' && exported !== null && typeof exported === 'object' && typeof exported.default === 'function') {
    exported = exported.default;
  }
  if (typeof exported === 'function') {
    return { hasValue: true, value: await exported(globalThis.context) };
  }
  if (returned !== undefined) return { hasValue: true, value: returned };
  if (mode === 'module' ? exported !== undefined : exported !== initialExports && exported !== undefined) {
    return { hasValue: true, value: exported };
  }
  if (mode === 'script') {
    if (isThenable(completion)) return { hasValue: true, value: await completion };
    if (completion !== undefined && endsWithIIFE(source)) return { hasValue: true, value: completion };
  }
  return { hasValue: false, drain: true };
}

process.on('uncaughtException', fail);
process.on('unhandledRejection', fail);
process.on('beforeExit', () => {
  if (state === 'draining') {
    finish({ hasValue: false });
  } else if (!reported) {
    report({ status: 'error', error_kind: 'code_error', error: 'the code awaited a promise that never settles: nothing was left to run' });
  }
});

main().then(
  (outcome) => {
    if (outcome.drain && exitRequest === null) {
      state = 'draining'; // reported on beforeExit, once the event loop is idle
      return;
    }
    finish(outcome);
  },
  fail,
);
