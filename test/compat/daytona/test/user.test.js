// Daytona's default account: sandboxes run as `daytona` with home
// /home/daytona, where Daytona's examples write.

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { createSandbox, newClient, sh } from './helpers.js'

const daytona = newClient()

describe('user', () => {
  it('a default sandbox runs as daytona in /home/daytona', { timeout: 180_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'user-default')
    assert.equal(sb.user, 'daytona')
    assert.equal(await sb.getUserHomeDir(), '/home/daytona')
    assert.equal(await sb.getWorkDir(), '/home/daytona')
    assert.equal(await sh(sb, 'echo "$(whoami) $HOME $(pwd)"'), 'daytona /home/daytona /home/daytona\n')
    // What the examples do: write under the home, by path and relative.
    await sb.fs.uploadFile(Buffer.from('from the sdk\n'), '/home/daytona/example.txt')
    await sb.fs.uploadFile(Buffer.from('relative\n'), 'relative.txt')
    // find -printf, not stat or ls: gVisor's statx (Debian's runsc 20221219)
    // refuses AT_NO_AUTOMOUNT, which coreutils 9 always passes (EINVAL).
    assert.equal(await sh(sb, "cat /home/daytona/example.txt /home/daytona/relative.txt && find example.txt -maxdepth 0 -printf '%u\\n'"), 'from the sdk\nrelative\ndaytona\n')
  })

  it('user "root" is honoured on request', { timeout: 180_000 }, async (t) => {
    const sb = await createSandbox(t, daytona, 'user-root', { user: 'root' })
    assert.equal(sb.user, 'root')
    assert.equal(await sh(sb, 'whoami'), 'root\n')
  })
})
