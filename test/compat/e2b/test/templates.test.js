// Template builds: Template.build (with file uploads, build logs and a start
// command), Template.exists, getTags/assignTags/removeTags, Sandbox.create
// from a built template by name and name:tag, and the delete E2B's CLI
// sends (DELETE /templates/{name}; the JS SDK has no call for it). Builds
// run on the host's local images: the suite's base template's image.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, writeFileSync, mkdirSync, rmSync, chmodSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'

import { BuildError, Template, waitForFile, waitForURL } from 'e2b'

import { createSandbox } from './helpers.js'

/** A unique template name for this run (names are per owner). */
function templateName(what) {
  return `compat-${what}-${randomUUID().slice(0, 8)}`
}

/** DELETE /templates/{name}, as E2B's CLI sends it; throws on an error status. */
async function deleteTemplate(name) {
  const res = await fetch(`${process.env.E2B_API_URL}/templates/${encodeURIComponent(name)}`, {
    method: 'DELETE',
    headers: { 'X-API-KEY': process.env.E2B_API_KEY },
  })
  if (res.status !== 204) {
    throw new Error(`delete template ${name}: ${res.status} ${await res.text()}`)
  }
}

/** Deletes a template by name, ignoring every error (for cleanup paths). */
async function deleteQuietly(name) {
  try {
    await deleteTemplate(name)
  } catch {
    // gone already, or in use by a sandbox that is being killed
  }
}

/** A build context directory with a file, a script and a nested file. */
function buildContext(t, nonce) {
  const dir = mkdtempSync(join(tmpdir(), 'e2b-compat-ctx-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(join(dir, 'hello.txt'), `hello ${nonce}\n`)
  writeFileSync(join(dir, 'run.sh'), '#!/bin/sh\necho ran\n')
  chmodSync(join(dir, 'run.sh'), 0o755)
  mkdirSync(join(dir, 'conf'))
  writeFileSync(join(dir, 'conf', 'app.ini'), `nonce=${nonce}\n`)
  return dir
}

describe('template builds', { concurrency: true, timeout: 600_000 }, () => {
  it('Template.build: files, env, workdir, a start command; create from it by name', { timeout: 300_000 }, async (t) => {
    const name = templateName('build')
    t.after(() => deleteQuietly(name))
    const nonce = randomUUID()
    const ctx = buildContext(t, nonce)

    const template = Template({ fileContextPath: ctx })
      .fromTemplate('base')
      .copy('hello.txt', '/opt/app/')
      .copy('run.sh', '/opt/app/run.sh')
      .copy('conf', '/etc/compat')
      .copy('.', '/ctx/')
      .runCmd('id -un > /opt/app/built-by.txt', { user: 'root' })
      .setEnvs({ COMPAT_NONCE: nonce })
      .runCmd('echo "built $COMPAT_NONCE" > /opt/app/built.txt')
      .setWorkdir('/opt/app')
      .runCmd('pwd > where.txt')
      .setStartCmd('python3 -m http.server 8123 --directory /opt/app', waitForURL('http://127.0.0.1:8123/hello.txt'))

    const logs = []
    const info = await Template.build(template, name, { onBuildLogs: (entry) => logs.push(entry.message) })
    assert.equal(info.name, name)
    assert.ok(info.buildId, 'a build id')
    assert.ok(logs.some((l) => l.includes('built')), `the build's own output is streamed: ${logs.join(' | ')}`)

    assert.equal(await Template.exists(name), true)
    assert.equal(await Template.exists(templateName('nope')), false)

    const sbx = await createSandbox(t, 'template', { template: name })
    assert.equal(await sbx.files.read('/opt/app/hello.txt'), `hello ${nonce}\n`)
    assert.equal(await sbx.files.read('/etc/compat/app.ini'), `nonce=${nonce}\n`)
    assert.equal(await sbx.files.read('/opt/app/built.txt'), `built ${nonce}\n`)
    assert.equal((await sbx.files.read('/opt/app/where.txt')).trim(), '/opt/app')
    assert.equal(await sbx.files.read('/ctx/conf/app.ini'), `nonce=${nonce}\n`, "copy('.') copies the whole context")
    assert.equal((await sbx.files.read('/opt/app/built-by.txt')).trim(), 'root')
    assert.equal((await sbx.commands.run('whoami')).stdout.trim(), 'user', "a step's own user is not the template's")
    const ran = await sbx.commands.run('/opt/app/run.sh')
    assert.equal(ran.stdout.trim(), 'ran', 'the script kept its mode')
    const env = await sbx.commands.run('echo $COMPAT_NONCE')
    assert.equal(env.stdout.trim(), nonce, "the template's env")
    const served = await sbx.commands.run('curl -s http://127.0.0.1:8123/hello.txt')
    assert.equal(served.stdout, `hello ${nonce}\n`, 'the start command runs and was ready before create answered')
  })

  it("Template.build: a relative copy() and runCmd() use the image's working directory", { timeout: 300_000 }, async (t) => {
    const name = templateName('workdir')
    t.after(() => deleteQuietly(name))
    const nonce = randomUUID()
    const ctx = buildContext(t, nonce)
    // The base image's WORKDIR is /home/user: relative paths land there,
    // and commands run there (they resolved against / and ran in /root).
    const template = Template({ fileContextPath: ctx })
      .fromTemplate('base')
      .copy('hello.txt', 'rel/')
      .runCmd('pwd > pwd.txt')
    await Template.build(template, name)
    const sbx = await createSandbox(t, 'template-workdir', { template: name })
    assert.equal(await sbx.files.read('/home/user/rel/hello.txt'), `hello ${nonce}\n`)
    assert.equal((await sbx.files.read('/home/user/pwd.txt')).trim(), '/home/user')
  })

  it('Template.build again: the same steps are cached, a changed one moves the name', { timeout: 300_000 }, async (t) => {
    const name = templateName('rebuild')
    t.after(() => deleteQuietly(name))
    const first = await Template.build(Template().fromTemplate('base').runCmd('echo one > /v.txt'), name)
    const logs = []
    const again = await Template.build(Template().fromTemplate('base').runCmd('echo one > /v.txt'), name, {
      onBuildLogs: (entry) => logs.push(entry.message),
    })
    assert.notEqual(again.buildId, first.buildId, 'every build has its id, as on E2B')
    assert.ok(!logs.some((l) => l.includes('step 1: run')), `the same steps are not run again: ${logs.join(' | ')}`)
    assert.deepEqual((await Template.getTags(name)).map((tag) => [tag.tag, tag.buildId]), [['default', again.buildId]])
    await Template.build(Template().fromTemplate('base').runCmd('echo two > /v.txt'), name)

    const sbx = await createSandbox(t, 'template', { template: name })
    assert.equal((await sbx.files.read('/v.txt')).trim(), 'two', 'the name is the newest build')
  })

  it('tags: build under name:tag, assign, list, create by tag, remove', { timeout: 300_000 }, async (t) => {
    const name = templateName('tags')
    t.after(() => deleteQuietly(name))
    const v1 = await Template.build(Template().fromTemplate('base').runCmd('echo v1 > /v.txt'), `${name}:v1`)
    const v2 = await Template.build(Template().fromTemplate('base').runCmd('echo v2 > /v.txt'), `${name}:v2`)
    assert.notEqual(v1.buildId, v2.buildId)

    const assigned = await Template.assignTags(`${name}:v1`, ['prod', 'stable'])
    assert.equal(assigned.buildId, v1.buildId)
    assert.deepEqual([...assigned.tags].sort(), ['prod', 'stable'])

    const tags = await Template.getTags(name)
    const byTag = Object.fromEntries(tags.map((tag) => [tag.tag, tag.buildId]))
    assert.deepEqual(byTag, { v1: v1.buildId, v2: v2.buildId, prod: v1.buildId, stable: v1.buildId })
    assert.ok(tags.every((tag) => tag.createdAt instanceof Date && !Number.isNaN(tag.createdAt.getTime())))

    const prod = await createSandbox(t, 'template', { template: `${name}:prod` })
    assert.equal((await prod.files.read('/v.txt')).trim(), 'v1')
    const latest = await createSandbox(t, 'template', { template: `${name}:v2` })
    assert.equal((await latest.files.read('/v.txt')).trim(), 'v2')

    await Template.removeTags(name, 'stable')
    assert.deepEqual((await Template.getTags(name)).map((tag) => tag.tag).sort(), ['prod', 'v1', 'v2'])
  })

  it('a failing step fails the build with its error; nothing is left under the name', { timeout: 300_000 }, async (t) => {
    const name = templateName('fail')
    t.after(() => deleteQuietly(name))
    const logs = []
    await assert.rejects(
      Template.build(Template().fromTemplate('base').runCmd('echo about to fail; exit 3'), name, {
        onBuildLogs: (entry) => logs.push(entry.message),
      }),
      (err) => err instanceof BuildError && /exit code 3/.test(err.message),
    )
    assert.ok(logs.some((l) => l.includes('about to fail')), `the failing step's output is streamed: ${logs.join(' | ')}`)
    assert.equal(await Template.exists(name), false)
  })

  it('an image the host does not have is a clear error', async () => {
    await assert.rejects(
      Template.build(Template().fromImage('registry.invalid/nothing:here'), templateName('noimage')),
      // Not pulled: the suite's daemon pulls only from 127.0.0.1 (--registry-allow).
      (err) => /not present on this host|may pull from|not found in its registry/.test(err.message),
    )
  })

  it('a built template in use is not deleted; once free it is', { timeout: 300_000 }, async (t) => {
    const name = templateName('inuse')
    t.after(() => deleteQuietly(name))
    await Template.build(Template().fromTemplate('base').setStartCmd('touch /tmp/started', waitForFile('/tmp/started')), name)
    const sbx = await createSandbox(t, 'template', { template: name })
    assert.equal((await sbx.commands.run('test -f /tmp/started && echo yes')).stdout.trim(), 'yes')
    await assert.rejects(deleteTemplate(name), /409.*in use/)
    await sbx.kill()
    await deleteTemplate(name)
    assert.equal(await Template.exists(name), false)
  })
})
