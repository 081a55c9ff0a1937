// Shared by the *.test.js files: configuration checks, sandbox creation that
// always cleans up, and bounded polling.
//
// Every sandbox is created with metadata {suite, run, test, nonce}. The nonce
// lets a test list only what it made, and keeps bodies distinct for a daemon
// run with --e2b-body-dedupe=body, where two tests creating the same template
// with the same options at once would otherwise share one sandbox (and kill
// it under each other).

import { randomUUID } from 'node:crypto'
import { request } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'

import { Sandbox } from 'e2b'

for (const name of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[name]) {
    throw new Error(`${name} is not set; run the suite through run.sh`)
  }
}
if (process.env.E2B_DEBUG) {
  throw new Error('E2B_DEBUG is set: the SDK would bypass the API entirely')
}

export const BASE = 'base'
export const CODE_INTERPRETER = 'code-interpreter-v1'
export const SUITE = 'sandboxd-compat-e2b'
// run.sh exports COMPAT_RUN_ID so that every file (one process each) shares it.
export const RUN_ID = process.env.COMPAT_RUN_ID || randomUUID()

// Whether the daemon's sandboxes run under gVisor (scripts/test-compat.sh:
// SANDBOXD_COMPAT_RUNTIME=gvisor, the daemons' --default-runtime), where a
// few things the base template offers cannot work; those cases skip, with
// the reason, under gVisor only.
export const GVISOR = process.env.SANDBOXD_COMPAT_RUNTIME === 'gvisor'

/** Metadata for one sandbox of the test named `test`; `extra` is merged in. */
export function metadataFor(test, extra = {}) {
  return { suite: SUITE, run: RUN_ID, test, nonce: randomUUID(), ...extra }
}

/**
 * Creates a sandbox (of `cls`, e2b's or code-interpreter's Sandbox) for the
 * test named `test` and registers its kill with the test context `t`, so it
 * goes away however the test ends.
 */
export async function createSandbox(t, test, { cls = Sandbox, template = BASE, ...opts } = {}) {
  const sbx = await cls.create(template, { ...opts, metadata: metadataFor(test, opts.metadata) })
  t.after(() => killQuietly(sbx.sandboxId))
  return sbx
}

/** Kills a sandbox by id, ignoring every error (for cleanup paths). */
export async function killQuietly(sandboxId) {
  try {
    await Sandbox.kill(sandboxId, { requestTimeoutMs: 30_000 })
  } catch {
    // already gone, or the daemon is down; run.sh sweeps what is left
  }
}

/** Calls fn until it returns a truthy value, at most timeoutMs; returns that value. */
export async function waitFor(fn, { timeoutMs = 30_000, intervalMs = 200, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs
  let lastError
  for (;;) {
    try {
      const value = await fn()
      if (value) return value
      lastError = undefined
    } catch (err) {
      lastError = err
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`, { cause: lastError })
    }
    await sleep(intervalMs)
  }
}

/** All pages of Sandbox.list(opts). */
export async function listAll(opts) {
  const paginator = Sandbox.list(opts)
  const items = []
  while (paginator.hasNext) {
    items.push(...(await paginator.nextItems()))
  }
  return items
}

/**
 * Sends one HTTP request to the daemon under test (E2B_SANDBOX_URL's
 * address) with Host set to `host`, as a client that resolves
 * `<port>-<id>.<domain>` to the daemon would (nothing here resolves
 * `*.localhost`). `target` is a path with its query, or a URL whose path
 * and query are used. Resolves to {status, headers, body} with the body as
 * text, read to its end (the daemon bounds what a test sends back).
 */
export function requestAs(host, target, { method = 'GET', headers = {}, body } = {}) {
  const daemon = new URL(process.env.E2B_SANDBOX_URL)
  const u = new URL(target, daemon)
  const withPort = host.includes(':') ? host : `${host}:${daemon.port}`
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: daemon.hostname,
        port: daemon.port,
        method,
        path: u.pathname + u.search,
        headers: { ...headers, Host: withPort },
        timeout: 60_000,
      },
      (res) => {
        const chunks = []
        res.on('data', (c) => chunks.push(c))
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }))
        res.on('error', reject)
      },
    )
    req.on('timeout', () => req.destroy(new Error(`request to ${withPort}${u.pathname} timed out`)))
    req.on('error', reject)
    req.end(body)
  })
}
