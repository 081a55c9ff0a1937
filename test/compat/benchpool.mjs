// What both SDK benchmarks (e2b/bench.mjs, daytona/bench.mjs) share: one
// SDK flow and the same flow on the native API, each measured with the
// warm pool on (pooled) and off (cold), interleaved in one run against
// one daemon, printed as a table of n, p50 and p95 in ms.
//
// The pool is toggled through the admin API (PUT /v1/pools): before a
// pooled sample the pool keeps 2 idle sandboxes of the class the SDK's
// creates fall in (read from a warm-up create: image, cpu, memory,
// network, runtime) and is full; before a cold sample it keeps none and
// has none. Whether a create was served by the pool is read, not assumed:
// a sample counts as pooled only if its sandbox was one of the idle ones
// listed just before it; the table says how many were.
//
// Everything a sample makes is deleted by the sample; the pool is set back
// to none at the end (run.sh's sweep and the daemon's stop do the rest).

import { performance } from 'node:perf_hooks'

const poolSize = 2
const waitMs = 180_000 // bound on a wait for the pool to settle

export const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.max(0, Math.ceil((p / 100) * s.length) - 1)]
}

export function pooling(api, token) {
  const h = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }
  const call = async (method, path, body) => {
    const res = await fetch(`${api}${path}`, { method, headers: h, body: body && JSON.stringify(body), signal: AbortSignal.timeout(120_000) })
    const text = await res.text()
    return { status: res.status, headers: res.headers, json: text ? JSON.parse(text) : null, text }
  }
  let cls = null

  // classOf reads the pool class of sandbox id.
  async function classOf(id) {
    const r = await call('GET', `/v1/sandboxes/${id}`)
    if (r.status !== 200) throw new Error(`GET /v1/sandboxes/${id}: ${r.status} ${r.text}`)
    const { image, cpu, memory_mb, network, runtime } = r.json
    return { image, cpu, memory_mb, network, runtime }
  }

  // set keeps size idle sandboxes of the class and waits until it has them
  // (and makes none): it returns their ids.
  async function set(size) {
    const r = await call('PUT', '/v1/pools', { pools: size ? [{ ...cls, size }] : [] })
    if (r.status !== 200) throw new Error(`PUT /v1/pools: ${r.status} ${r.text}`)
    const deadline = Date.now() + waitMs
    for (;;) {
      const st = await call('GET', '/v1/pools')
      const p = st.json.pools.find(p => p.image === cls.image && p.memory_mb === cls.memory_mb && p.cpu === cls.cpu)
      const ready = p?.ready ?? 0, filling = p?.filling ?? 0
      if (ready === size && filling === 0) return new Set(p?.sandbox_ids ?? [])
      if (Date.now() > deadline) throw new Error(`the pool has ${ready} ready, ${filling} filling, want ${size}`)
      await new Promise(r => setTimeout(r, 20))
    }
  }

  // native is the flow on /v1: create the class → exec → (delete, untimed).
  async function native(execBody) {
    const t0 = performance.now()
    const res = await call('POST', '/v1/sandboxes', cls)
    if (res.status !== 201) throw new Error(`native create: ${res.status} ${res.text}`)
    const id = res.json.id
    const ex = await call('POST', `/v1/sandboxes/${id}/exec`, execBody)
    if (ex.status !== 200) throw new Error(`native exec: ${ex.status} ${ex.text}`)
    const ms = performance.now() - t0
    await call('DELETE', `/v1/sandboxes/${id}`)
    return { ms, id }
  }

  // measure runs n rounds of: the SDK flow and the native flow with the
  // pool full, then both with the pool empty (the order of the two phases
  // alternates), and prints the table. sdk() returns {ms, id} and deletes
  // its sandbox; warm() makes one sandbox with the SDK, returns its id and
  // is told to delete it.
  async function measure({ n, title, sdkName, sdk, warm, execBody }) {
    const id = await warm.create()
    cls = await classOf(id)
    await warm.remove()
    const rows = { sdkPooled: [], nativePooled: [], sdkCold: [], nativeCold: [] }
    const hits = { sdkPooled: 0, nativePooled: 0 }
    const pooledPhase = async () => {
      let idle = await set(poolSize)
      let s = await sdk()
      rows.sdkPooled.push(s.ms)
      if (idle.has(s.id)) hits.sdkPooled++
      idle = await set(poolSize)
      s = await native(execBody)
      rows.nativePooled.push(s.ms)
      if (idle.has(s.id)) hits.nativePooled++
    }
    const coldPhase = async () => {
      await set(0)
      rows.sdkCold.push((await sdk()).ms)
      rows.nativeCold.push((await native(execBody)).ms)
    }
    try {
      for (let i = 0; i < n; i++) {
        if (i % 2 === 0) { await pooledPhase(); await coldPhase() } else { await coldPhase(); await pooledPhase() }
      }
    } finally {
      await set(0).catch(() => {})
    }
    const w = 54
    const row = (name, xs, note = '') => console.log(`${name.padEnd(w)} ${String(xs.length).padStart(3)} ${pct(xs, 50).toFixed(0).padStart(8)} ${pct(xs, 95).toFixed(0).padStart(8)}  ${note}`)
    console.log(`pool class ${JSON.stringify(cls)}; pooled: the pool toggled on (${poolSize} idle, full) before each sample, cold: toggled off (PUT /v1/pools)`)
    console.log(`${title.padEnd(w)}   n      p50      p95`)
    row(`${sdkName}, pooled`, rows.sdkPooled, `served by the pool: ${hits.sdkPooled}/${rows.sdkPooled.length}`)
    row(`${sdkName}, cold`, rows.sdkCold)
    row('native API: POST /v1/sandboxes → exec, pooled', rows.nativePooled, `served by the pool: ${hits.nativePooled}/${rows.nativePooled.length}`)
    row('native API: POST /v1/sandboxes → exec, cold', rows.nativeCold)
  }

  return { measure }
}
