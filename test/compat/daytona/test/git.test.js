// sandbox.git through the toolbox (/git/clone, /git/status) against a
// repository made inside the sandbox: nothing leaves the machine.

import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'

import { DaytonaError } from '@daytonaio/sdk'

import { createSandbox, deleteQuietly, newClient, nonce, sh } from './helpers.js'

const daytona = newClient()

const GIT = 'git -c user.name=compat -c user.email=compat@example.invalid'

describe('git', () => {
  let sb
  let base
  let origin
  let head
  before(async () => {
    sb = await createSandbox(null, daytona, 'git')
    base = `/tmp/dt-git-${nonce()}`
    origin = `${base}/origin`
    // A repository with two commits on main and one more on a feature branch.
    const out = await sh(
      sb,
      [
        'set -e',
        `mkdir -p ${origin}`,
        `cd ${origin}`,
        'git init -q -b main',
        "printf 'hello\\n' > README.md",
        'mkdir -p src && echo "print(1)" > src/app.py',
        'git add README.md src/app.py',
        `${GIT} commit -q -m first`,
        "printf 'hello again\\n' >> README.md",
        `${GIT} commit -q -am second`,
        'git branch feature',
        'git checkout -q feature',
        'echo feature > FEATURE.txt',
        'git add FEATURE.txt',
        `${GIT} commit -q -m feature`,
        'git checkout -q main',
        'git rev-parse main',
      ].join('\n'),
    )
    head = out.trim()
    assert.match(head, /^[0-9a-f]{40}$/)
  }, { timeout: 180_000 })
  after(async () => {
    if (sb) await deleteQuietly(sb)
  })

  it('clones a file:// URL and reports a clean status on main', { timeout: 90_000 }, async () => {
    const dest = `${base}/clone-url`
    await sb.git.clone(`file://${origin}`, dest)
    assert.equal(await sh(sb, `git -C ${dest} rev-parse HEAD`), `${head}\n`)
    assert.equal(await sh(sb, `cat ${dest}/README.md`), 'hello\nhello again\n')

    const status = await sb.git.status(dest)
    assert.equal(status.currentBranch, 'main')
    assert.deepEqual(status.fileStatus, [])
  })

  it('clones a plain local path', { timeout: 90_000 }, async () => {
    const dest = `${base}/clone-path`
    await sb.git.clone(origin, dest)
    assert.equal(await sh(sb, `git -C ${dest} rev-parse HEAD`), `${head}\n`)
    assert.equal((await sb.git.status(dest)).currentBranch, 'main')
    // Files are readable through the toolbox too.
    assert.equal((await sb.fs.downloadFile(`${dest}/src/app.py`)).toString(), 'print(1)\n')
  })

  it('clones a branch', { timeout: 90_000 }, async () => {
    const dest = `${base}/clone-feature`
    await sb.git.clone(`file://${origin}`, dest, 'feature')
    assert.equal((await sb.git.status(dest)).currentBranch, 'feature')
    assert.equal(await sh(sb, `cat ${dest}/FEATURE.txt`), 'feature\n')
  })

  it('status reports modified and untracked files', { timeout: 90_000 }, async () => {
    const dest = `${base}/clone-dirty`
    await sb.git.clone(`file://${origin}`, dest)
    await sh(sb, `cd ${dest} && echo changed >> README.md && echo new > untracked.txt`)

    const status = await sb.git.status(dest)
    assert.equal(status.currentBranch, 'main')
    const byName = Object.fromEntries(status.fileStatus.map((f) => [f.name, f]))
    assert.deepEqual(Object.keys(byName).sort(), ['README.md', 'untracked.txt'])
    assert.equal(byName['README.md'].worktree, 'Modified')
    assert.equal(byName['untracked.txt'].worktree, 'Untracked')
    for (const f of status.fileStatus) {
      assert.equal(typeof f.staging, 'string')
      assert.equal(typeof f.extra, 'string')
    }
  })

  it('cloning from a path that is not a repository fails with a DaytonaError', { timeout: 60_000 }, async () => {
    const dest = `${base}/clone-bad-${nonce()}`
    await assert.rejects(sb.git.clone(`file://${base}/does-not-exist`, dest), (err) => {
      assert.ok(err instanceof DaytonaError, `got ${err?.name}: ${err?.message}`)
      assert.ok(err.statusCode >= 400 && err.statusCode < 600, `status ${err.statusCode}`)
      return true
    })
  })
})
