// Ports by host, as E2B serves them: sandbox.getHost(port) is
// <port>-<id>.<domain>, and any port of a sandbox answers there with no
// expose call first. allowPublicTraffic: false puts every port but envd's
// behind the traffic access token; maskRequestHost rewrites the Host the
// server in the sandbox sees.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { createSandbox, requestAs, waitFor } from './helpers.js'

// A server that answers every GET with the Host and path it got.
const HOST_ECHO = `
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("host=%s path=%s" % (self.headers.get("Host"), self.path)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

/** Starts the host echo server on port inside sbx (in the background). */
async function startEcho(sbx, port) {
  await sbx.files.write('/tmp/host_echo.py', HOST_ECHO)
  await sbx.commands.run(`python3 /tmp/host_echo.py ${port}`, { background: true })
}

/** GETs path on host until the server in the sandbox answers 200. */
function untilServed(host, path, headers) {
  return waitFor(
    async () => {
      const res = await requestAs(host, path, { headers })
      return res.status === 200 && res
    },
    { timeoutMs: 60_000, what: `${host} to answer` },
  )
}

describe('ports by host', { concurrency: true, timeout: 600_000 }, () => {
  it('getHost(port) reaches a server in the sandbox with no expose call', { timeout: 180_000 }, async (t) => {
    const sbx = await createSandbox(t, 'ports-public')
    await startEcho(sbx, 8080)
    const host = sbx.getHost(8080)
    // The domain carries the daemon's port: the link opens as it is.
    assert.equal(host, `8080-${sbx.sandboxId}.localhost:${new URL(process.env.E2B_SANDBOX_URL).port}`)
    const res = await untilServed(host, '/hello?x=1')
    assert.match(res.body, new RegExp(`^host=8080-${sbx.sandboxId}\\.localhost:\\d+ path=/hello\\?x=1$`))
    // A port nothing listens on is the daemon's answer, not a hang.
    const closed = await requestAs(sbx.getHost(8081), '/')
    assert.equal(closed.status, 502, closed.body)
  })

  it('allowPublicTraffic: false wants the traffic token; maskRequestHost rewrites Host', { timeout: 180_000 }, async (t) => {
    const sbx = await createSandbox(t, 'ports-private', {
      network: { allowPublicTraffic: false, maskRequestHost: 'app-${PORT}.example.test' },
    })
    assert.ok(sbx.trafficAccessToken, 'create returned a traffic access token')
    await startEcho(sbx, 8080)
    const host = sbx.getHost(8080)
    const res = await untilServed(host, '/', { 'e2b-traffic-access-token': sbx.trafficAccessToken })
    assert.equal(res.body, 'host=app-8080.example.test path=/')

    const without = await requestAs(host, '/')
    assert.equal(without.status, 403, without.body)
    assert.equal(JSON.parse(without.body).code, 403)
    const wrong = await requestAs(host, '/', { headers: { 'e2b-traffic-access-token': 'not-the-token' } })
    assert.equal(wrong.status, 403, wrong.body)
    // envd keeps its own token: the SDK still works on this sandbox.
    assert.equal((await sbx.commands.run('echo ok')).stdout, 'ok\n')
  })

  it('a host for an unknown or killed sandbox is E2B\'s 502', { timeout: 120_000 }, async (t) => {
    const unknown = await requestAs('8080-sb-00000000deadbeef.localhost', '/')
    assert.equal(unknown.status, 502, unknown.body)
    assert.deepEqual(JSON.parse(unknown.body), { sandboxId: 'sb-00000000deadbeef', message: 'The sandbox was not found', code: 502 })

    const sbx = await createSandbox(t, 'ports-killed')
    const host = sbx.getHost(8080)
    await sbx.kill()
    const killed = await requestAs(host, '/')
    assert.equal(killed.status, 502, killed.body)
    assert.deepEqual(JSON.parse(killed.body), { sandboxId: sbx.sandboxId, message: 'The sandbox was not found', code: 502 })
  })
})
