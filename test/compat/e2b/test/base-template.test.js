// What E2B's base template offers and code written for E2B relies on.

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { describe, it } from 'node:test'

import { Sandbox, SandboxError } from 'e2b'

import { GVISOR, RUN_ID, listAll, metadataFor, createSandbox } from './helpers.js'

const repo = fileURLToPath(new URL('../../../../', import.meta.url))

/**
 * Why the engine's base image cannot show this checkout's template, or
 * undefined: another checkout sharing the engine may have rebuilt
 * sandboxd/base:bookworm from its own recipe (`make setup` rebuilds it from
 * this one; in CI setup always runs first, so there it is a failure).
 */
function baseImageMismatch() {
  const want = execFileSync('bash', [`${repo}scripts/build-images.sh`, '--recipe', 'base']).toString().trim()
  const got = execFileSync('docker', ['image', 'inspect', '--format', '{{index .Config.Labels "sandboxd.recipe"}}', 'sandboxd/base:bookworm'])
    .toString()
    .trim()
  if (got === want) return undefined
  const msg = `sandboxd/base:bookworm has recipe ${got}, this checkout's is ${want}: run scripts/build-images.sh base`
  if (process.env.CI) throw new Error(msg)
  return msg
}

describe('base template', { concurrency: true }, () => {
  it('user has passwordless sudo, quietly', { timeout: 120_000 }, async (t) => {
    const mismatch = baseImageMismatch()
    if (mismatch) return t.skip(mismatch)
    // runsc: "noNewPrivileges ignored. PR_SET_NO_NEW_PRIVS is assumed to
    // always be set" (prctl(PR_GET_NO_NEW_PRIVS) is 1 in every process).
    if (GVISOR) return t.skip('gVisor sets no_new_privs on every process: sudo cannot become root')
    const sbx = await createSandbox(t, 'base-sudo')
    const res = await sbx.commands.run('whoami && sudo -n whoami && sudo -n apt-get --version >/dev/null && echo apt-ok')
    assert.equal(res.stdout, 'user\nroot\napt-ok\n')
    assert.equal(res.stderr, '')
    // E2B's scoped-env pattern: sudo keeps what is passed on its command line.
    const env = await sbx.commands.run('sudo -n env SCOPED=yes sh -c \'echo "$SCOPED $(id -u)"\'', { envs: { OUTER: 'x' } })
    assert.equal(env.stdout, 'yes 0\n')
  })

  // E2B's own suite runs `python -m http.server` and sets file metadata
  // with setfattr (user.e2b.* attributes, which getInfo reports).
  it('python is python3, and setfattr sets metadata getInfo reports', { timeout: 120_000 }, async (t) => {
    const mismatch = baseImageMismatch()
    if (mismatch) return t.skip(mismatch)
    const sbx = await createSandbox(t, 'base-python-attr')
    const py = await sbx.commands.run('python -c "import sys; print(sys.version_info[0])"')
    assert.equal(py.stdout, '3\n')
    // setfattr answers "Operation not supported" on runsc's gofer file
    // systems (Debian's runsc 20221219), on the engine and --engine oci.
    if (GVISOR) return t.skip('gVisor\'s file systems refuse user.* extended attributes')
    await sbx.files.write('attr.txt', 'x')
    await sbx.commands.run('setfattr -n user.e2b.author -v alice "$HOME/attr.txt"')
    assert.deepEqual((await sbx.files.getInfo('attr.txt')).metadata, { author: 'alice' })
  })

  it('create with mcp fails as the SDK reports a gateway that cannot start, leaving nothing', { timeout: 120_000 }, async (t) => {
    const mismatch = baseImageMismatch()
    if (mismatch) return t.skip(mismatch)
    await assert.rejects(
      Sandbox.create({ mcp: { exa: { apiKey: 'not-used' } }, metadata: metadataFor('base-mcp') }),
      (err) => {
        assert.ok(err instanceof SandboxError, `${err?.name}: ${err?.message}`)
        assert.match(err.message, /^Failed to start MCP gateway: sandboxd: the MCP gateway is not available/)
        return true
      },
    )
    // The SDK killed the sandbox it made.
    assert.deepEqual(await listAll({ query: { metadata: { run: RUN_ID, test: 'base-mcp' } } }), [])
  })
})
