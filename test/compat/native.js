// Shared by the SDK suites: what they read of the daemon through its native
// admin API (SANDBOXD_URL, SANDBOXD_TOKEN, set by daemon.sh), which no SDK
// can show. It imports nothing, so each suite's package loads it as is.

/** The native API's /v1/pools, or null when the token is not an admin's. */
async function pools(method = 'GET', body) {
  const res = await fetch(`${process.env.SANDBOXD_URL}/v1/pools`, {
    method,
    headers: { Authorization: `Bearer ${process.env.SANDBOXD_TOKEN}`, 'Content-Type': 'application/json' },
    body: body && JSON.stringify(body),
  })
  if (res.status === 403) return null
  if (!res.ok) throw new Error(`${method} /v1/pools: ${res.status} ${await res.text()}`)
  return (await res.json()).pools
}

/** The warm pool's idle sandboxes' ids, or null when the token may not read the pool. */
export async function idleIDs() {
  const p = await pools()
  return p && p.flatMap((c) => c.sandbox_ids ?? [])
}

/**
 * Empties the warm pool until the test `t` ends, then restores its targets
 * (a pooled create answers in milliseconds, before an abort can reach it).
 * Returns false, changing nothing, when the token is not an admin's.
 */
export async function withoutPool(t) {
  const before = await pools()
  if (before === null) return false
  await pools('PUT', { pools: [] })
  t.after(() => pools('PUT', {
    pools: before.map(({ image, runtime, cpu, memory_mb, network, size }) => ({ image, runtime, cpu, memory_mb, network, size })),
  }))
  return true
}
