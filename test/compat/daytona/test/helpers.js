// Shared by the *.test.js files: configuration checks, one Daytona client per
// file that is disposed when the file ends, sandbox creation that always
// cleans up, and bounded polling.
//
// Every sandbox is created with labels {suite, run, test, nonce}: run.sh
// sweeps what a run left behind by its run label, and the nonce keeps two
// sandboxes of one test apart.

import { randomUUID } from 'node:crypto'
import { after } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'

import { Daytona, DaytonaNotFoundError } from '@daytonaio/sdk'

for (const name of ['DAYTONA_API_URL', 'DAYTONA_API_KEY']) {
  if (!process.env[name]) {
    throw new Error(`${name} is not set; run the suite through run.sh`)
  }
}
for (const name of ['DAYTONA_SERVER_URL', 'DAYTONA_JWT_TOKEN', 'DAYTONA_TARGET']) {
  if (process.env[name]) {
    throw new Error(`${name} is set; run.sh unsets it (it would change what the SDK sends)`)
  }
}

export const SUITE = 'sandboxd-compat-daytona'
// run.sh exports COMPAT_RUN_ID so that every file (one process each) shares it.
export const RUN_ID = process.env.COMPAT_RUN_ID || randomUUID()
export const API_URL = process.env.DAYTONA_API_URL

/** A short random hex string for unique names and paths. */
export function nonce(len = 12) {
  return randomUUID().replaceAll('-', '').slice(0, len)
}

/**
 * A Daytona client configured from the environment only (DAYTONA_API_URL,
 * DAYTONA_API_KEY), as a team's unchanged code would build it. It is disposed
 * when the test file ends: the SDK keeps a socket.io client (and its retry
 * timers) per client, which would otherwise hold the process open.
 */
export function newClient() {
  const daytona = new Daytona()
  after(async () => {
    await daytona[Symbol.asyncDispose]()
  })
  return daytona
}

/** Labels for one sandbox of the test named `test`; `extra` is merged in. */
export function labelsFor(test, extra = {}) {
  return { suite: SUITE, run: RUN_ID, test, nonce: nonce(), ...extra }
}

/**
 * Creates a sandbox for the test named `test` (params as for daytona.create;
 * labels are merged into ours). With a test context `t` its deletion is
 * registered with t.after, so it goes away however the test ends; a suite
 * that shares one sandbox passes null and deletes it in its own after hook.
 */
export async function createSandbox(t, daytona, test, params = {}, timeoutSec = 120) {
  const sandbox = await daytona.create({ ...params, labels: labelsFor(test, params.labels) }, { timeout: timeoutSec })
  t?.after(() => deleteQuietly(sandbox))
  return sandbox
}

/** Deletes a sandbox, ignoring every error (for cleanup paths). */
export async function deleteQuietly(sandbox) {
  try {
    await sandbox.delete(60)
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

/** Rejects with a clear message if promise has not settled within ms. */
export async function within(ms, what, promise) {
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

/** Every sandbox daytona.list(query) yields. */
export async function listAll(daytona, query) {
  const out = []
  for await (const sandbox of daytona.list(query)) {
    out.push(sandbox)
  }
  return out
}

/** True once the API no longer knows the sandbox (404) or reports it destroyed. */
export async function isGone(daytona, idOrName) {
  try {
    const sandbox = await daytona.get(idOrName)
    return sandbox.state === 'destroyed'
  } catch (err) {
    if (err instanceof DaytonaNotFoundError) return true
    throw err
  }
}

/** Runs a shell command in the sandbox and insists that it succeeds; returns its output. */
export async function sh(sandbox, command, opts = {}) {
  const res = await sandbox.process.executeCommand(command, opts.cwd, opts.env, opts.timeout ?? 60)
  if (res.exitCode !== 0) {
    throw new Error(`command failed with exit code ${res.exitCode}: ${command}\n${res.result}`)
  }
  return res.result
}

/** Single-quotes s for a POSIX shell. */
export function shq(s) {
  return `'${String(s).replaceAll("'", `'\\''`)}'`
}
