// Deletes what a run left behind through the daemon's native API: the
// sandboxes tagged suite=sandboxd-compat-daytona and run=<COMPAT_RUN_ID> (the
// Daytona labels the tests set), or with --all every sandbox the token can
// list (for a daemon run.sh started itself). Best effort and bounded: it never
// fails the run and gives up after 60 s.
//
//   SANDBOXD_URL=... SANDBOXD_TOKEN=... COMPAT_RUN_ID=... node sweep.js [--all]
//
// Native API: GET /v1/sandboxes?tag.<k>=<v>&page_token=... answers
// {items, next_page_token}; DELETE /v1/sandboxes/{id} answers 204 (404 when
// already gone).

const deadline = Date.now() + 60_000
const timer = setTimeout(() => {
  console.error('sweep: gave up after 60 s')
  process.exit(0)
}, 60_000)

const all = process.argv.includes('--all')
const base = (process.env.SANDBOXD_URL || '').replace(/\/+$/, '')
const token = process.env.SANDBOXD_TOKEN
const runId = process.env.COMPAT_RUN_ID

async function call(method, path) {
  const res = await fetch(base + path, {
    method,
    headers: { Authorization: `Bearer ${token}` },
    signal: AbortSignal.timeout(Math.max(1_000, Math.min(30_000, deadline - Date.now()))),
  })
  const text = await res.text()
  if (!res.ok && !(method === 'DELETE' && res.status === 404)) {
    throw new Error(`${method} ${path}: HTTP ${res.status} ${text.slice(0, 200)}`)
  }
  return text ? JSON.parse(text) : null
}

try {
  if (!base || !token) throw new Error('SANDBOXD_URL and SANDBOXD_TOKEN must be set')
  if (!all && !runId) throw new Error('COMPAT_RUN_ID is not set')
  const filter = all ? '' : `&tag.suite=sandboxd-compat-daytona&tag.run=${encodeURIComponent(runId)}`
  const ids = new Set()
  let pageToken = ''
  for (let page = 0; page < 100; page++) {
    const body = await call('GET', `/v1/sandboxes?limit=100${filter}${pageToken ? `&page_token=${encodeURIComponent(pageToken)}` : ''}`)
    for (const sb of body?.items ?? []) ids.add(sb.id)
    pageToken = body?.next_page_token || ''
    if (!pageToken) break
  }
  const results = await Promise.allSettled([...ids].map((id) => call('DELETE', `/v1/sandboxes/${encodeURIComponent(id)}`)))
  const failed = results.filter((r) => r.status === 'rejected')
  if (ids.size > 0) {
    console.error(
      `sweep: deleted ${ids.size - failed.length} leftover sandbox(es)` +
        (failed.length ? `; ${failed.length} failed: ${failed[0].reason?.message ?? failed[0].reason}` : ''),
    )
  }
} catch (err) {
  console.error(`sweep: ${err.message}`)
}
clearTimeout(timer)
