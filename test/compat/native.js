// Shared by the SDK suites: what they read of the daemon through its native
// admin API (SANDBOXD_URL, SANDBOXD_TOKEN, set by daemon.sh), which no SDK
// can show. It imports nothing, so each suite's package loads it as is.

/**
 * The native API's /v1/pools of the node at base, or null when the token is
 * not an admin's. In cluster mode a GET also has the other nodes' pools
 * (`nodes`), and all: true returns them with the node's own.
 */
async function pools(method = 'GET', body, { base = process.env.SANDBOXD_URL, all = false } = {}) {
  const res = await fetch(`${base}/v1/pools`, {
    method,
    headers: { Authorization: `Bearer ${process.env.SANDBOXD_TOKEN}`, 'Content-Type': 'application/json' },
    body: body && JSON.stringify(body),
  })
  if (res.status === 403) return null
  if (!res.ok) throw new Error(`${method} /v1/pools: ${res.status} ${await res.text()}`)
  const json = await res.json()
  return all ? [...json.pools, ...(json.nodes ?? []).flatMap((n) => n.pools)] : json.pools
}

/** The API URLs of every node (a cluster's), or just SANDBOXD_URL's on a single node. */
export async function nodeURLs() {
  const res = await fetch(`${process.env.SANDBOXD_URL}/v1/cluster/nodes`, {
    headers: { Authorization: `Bearer ${process.env.SANDBOXD_TOKEN}` },
  })
  if (!res.ok) return [process.env.SANDBOXD_URL]
  return (await res.json()).items.map((n) => n.api_url)
}

/**
 * The warm pool's idle sandboxes' ids (every node's, in a cluster, where a
 * create may be placed on any), or null when the token may not read the pool.
 */
export async function idleIDs() {
  const p = await pools('GET', undefined, { all: true })
  return p && p.flatMap((c) => c.sandbox_ids ?? [])
}

/**
 * Empties the warm pool (every node's, in a cluster) until the test `t` ends, then restores its targets
 * (a pooled create answers in milliseconds, before an abort can reach it).
 * Returns false, changing nothing, when the token is not an admin's.
 */
export async function withoutPool(t) {
  for (const base of await nodeURLs()) {
    const before = await pools('GET', undefined, { base })
    if (before === null) return false
    await pools('PUT', { pools: [] }, { base })
    t.after(() => pools('PUT', {
      pools: before.map(({ image, runtime, cpu, memory_mb, network, size }) => ({ image, runtime, cpu, memory_mb, network, size })),
    }, { base }))
  }
  return true
}
