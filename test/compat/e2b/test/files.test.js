// Files: envd's filesystem.Filesystem service (Connect JSON) and its plain
// HTTP /files upload and download. One sandbox for the file; each test works
// in its own directory.

import assert from 'node:assert/strict'
import { createHash, randomBytes, randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'

import { FileNotFoundError, FileType, FilesystemEventType, Sandbox } from 'e2b'

import { GVISOR, killQuietly, metadataFor, requestAs, waitFor } from './helpers.js'

// gVisor's file systems (Debian's runsc 20221219) refuse user.* extended
// attributes, where E2B's file metadata lives: 'operation not supported'.
const NO_XATTRS = 'gVisor\'s file systems refuse user.* extended attributes (file metadata)'

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex')

describe('files', { concurrency: true, timeout: 600_000 }, () => {
  let sbx
  before(async () => {
    sbx = await Sandbox.create('base', { metadata: metadataFor('files') })
  })
  after(() => sbx && killQuietly(sbx.sandboxId))

  /** A fresh directory for one test. */
  async function scratch() {
    const dir = `/tmp/compat-${randomUUID()}`
    assert.equal(await sbx.files.makeDir(dir), true)
    return dir
  }

  it('writes, reads, lists, stats, renames and removes', { timeout: 120_000 }, async () => {
    const dir = await scratch()
    assert.equal(await sbx.files.makeDir(dir), false, 'makeDir of an existing dir gives false')
    assert.equal(await sbx.files.makeDir(`${dir}/sub/deeper`), true)

    const written = await sbx.files.write(`${dir}/a.txt`, 'hello')
    assert.equal(written.name, 'a.txt')
    assert.equal(written.path, `${dir}/a.txt`)
    assert.equal(written.type, FileType.FILE)
    assert.equal(await sbx.files.read(`${dir}/a.txt`), 'hello')
    assert.equal(await sbx.files.exists(`${dir}/a.txt`), true)
    assert.equal(await sbx.files.exists(`${dir}/missing.txt`), false)

    const entries = await sbx.files.list(dir)
    const byName = Object.fromEntries(entries.map((e) => [e.name, e]))
    assert.deepEqual(Object.keys(byName).sort(), ['a.txt', 'sub'])
    assert.equal(byName['a.txt'].type, FileType.FILE)
    assert.equal(byName['a.txt'].size, 5)
    assert.equal(byName['a.txt'].path, `${dir}/a.txt`)
    assert.equal(byName.sub.type, FileType.DIR)
    const deep = await sbx.files.list(dir, { depth: 2 })
    assert.ok(deep.some((e) => e.path === `${dir}/sub/deeper`), 'depth 2 lists sub/deeper')

    const info = await sbx.files.getInfo(`${dir}/a.txt`)
    assert.equal(info.name, 'a.txt')
    assert.equal(info.type, FileType.FILE)
    assert.equal(info.size, 5)
    assert.equal(info.path, `${dir}/a.txt`)
    assert.match(info.permissions, /^-[rwx-]{9}$/)
    assert.ok(info.modifiedTime instanceof Date && Math.abs(info.modifiedTime - Date.now()) < 120_000)
    assert.equal((await sbx.files.getInfo(dir)).type, FileType.DIR)
    await assert.rejects(sbx.files.getInfo(`${dir}/missing.txt`), FileNotFoundError)

    const moved = await sbx.files.rename(`${dir}/a.txt`, `${dir}/b.txt`)
    assert.equal(moved.path, `${dir}/b.txt`)
    assert.equal(await sbx.files.exists(`${dir}/a.txt`), false)
    assert.equal(await sbx.files.read(`${dir}/b.txt`), 'hello')

    await sbx.files.remove(`${dir}/b.txt`)
    assert.equal(await sbx.files.exists(`${dir}/b.txt`), false)
    await assert.rejects(sbx.files.read(`${dir}/b.txt`), FileNotFoundError)
    await sbx.files.remove(dir)
    assert.equal(await sbx.files.exists(dir), false)
  })

  it('writes several files at once, and bytes', { timeout: 120_000 }, async () => {
    const dir = await scratch()
    const infos = await sbx.files.write([
      { path: `${dir}/one.txt`, data: 'one' },
      { path: `${dir}/nested/two.txt`, data: 'two' }, // parents are created
    ])
    assert.deepEqual(infos.map((i) => i.path).sort(), [`${dir}/nested/two.txt`, `${dir}/one.txt`])
    assert.equal(await sbx.files.read(`${dir}/nested/two.txt`), 'two')

    const bytes = new Uint8Array([0, 1, 2, 253, 254, 255])
    await sbx.files.write(`${dir}/bin`, bytes.buffer)
    assert.deepEqual(await sbx.files.read(`${dir}/bin`, { format: 'bytes' }), bytes)
    await sbx.files.write(`${dir}/empty`, '')
    assert.equal(await sbx.files.read(`${dir}/empty`), '')
  })

  it('uploads and downloads 20 MB intact', { timeout: 300_000 }, async () => {
    const dir = await scratch()
    const data = randomBytes(20 * 1024 * 1024)
    const want = sha256(data)

    // multipart upload (the SDK's default for buffered data), buffered download
    await sbx.files.write(`${dir}/big.bin`, new Blob([data]))
    assert.equal((await sbx.files.getInfo(`${dir}/big.bin`)).size, data.length)
    assert.equal(sha256(await sbx.files.read(`${dir}/big.bin`, { format: 'bytes' })), want)
    const onDisk = await sbx.commands.run(`sha256sum ${dir}/big.bin`)
    assert.equal(onDisk.stdout.split(' ')[0], want)

    // streamed upload (octet-stream when envd >= 0.5.7, else multipart), streamed download
    await sbx.files.write(`${dir}/big2.bin`, new Blob([data]).stream())
    const stream = await sbx.files.read(`${dir}/big2.bin`, { format: 'stream' })
    const hash = createHash('sha256')
    for await (const chunk of stream) hash.update(chunk)
    assert.equal(hash.digest('hex'), want)
  })

  it('watchDir reports a write', { timeout: 120_000 }, async () => {
    const dir = await scratch()
    const events = []
    const handle = await sbx.files.watchDir(dir, (event) => events.push(event), { timeoutMs: 60_000 })
    try {
      await sbx.files.write(`${dir}/watched.txt`, 'first')
      await waitFor(
        () => events.some((e) => e.name === 'watched.txt' && e.type === FilesystemEventType.WRITE),
        { what: `a write event for watched.txt (got ${JSON.stringify(events)})` },
      )
      await sbx.files.remove(`${dir}/watched.txt`)
      await waitFor(
        () => events.some((e) => e.name === 'watched.txt' && e.type === FilesystemEventType.REMOVE),
        { what: 'a remove event for watched.txt' },
      )
    } finally {
      await handle.stop()
    }
  })

  // uploadUrl()/downloadUrl() of a secure sandbox are signed with its envd
  // access token. They carry no sandbox id (the SDK builds them on
  // E2B_SANDBOX_URL), so they are sent the way a browser would reach the
  // sandbox: to its envd host, 49983-<id>.<domain>.
  it('signed upload and download URLs, with expiry', { timeout: 120_000 }, async () => {
    const dir = await scratch()
    const envdHost = sbx.getHost(49983)
    const path = `${dir}/signed.txt`

    const up = await sbx.uploadUrl(path, { useSignatureExpiration: 120 })
    assert.match(up, /[?&]signature=v1_/)
    assert.match(up, /[?&]signature_expiration=\d+/)
    const form = new FormData()
    form.append('file', new Blob(['signed upload']), path)
    const posted = new Response(form)
    const put = await requestAs(envdHost, up, {
      method: 'POST',
      headers: { 'Content-Type': posted.headers.get('content-type') },
      body: Buffer.from(await posted.arrayBuffer()),
    })
    assert.equal(put.status, 200, put.body)
    assert.equal(await sbx.files.read(path), 'signed upload')

    const down = await requestAs(envdHost, await sbx.downloadUrl(path, { useSignatureExpiration: 120 }))
    assert.equal(down.status, 200, down.body)
    assert.equal(down.body, 'signed upload')
    const forever = await requestAs(envdHost, await sbx.downloadUrl(path))
    assert.equal(forever.status, 200, forever.body)

    // Expired: signed for an expiration already past.
    const expired = new URL(await sbx.downloadUrl(path, { useSignatureExpiration: -10 }))
    const late = await requestAs(envdHost, expired.toString())
    assert.equal(late.status, 401, late.body)
    assert.equal(JSON.parse(late.body).code, 401)
    // Tampered: the signature of one path does not open another.
    const other = new URL(await sbx.downloadUrl(path))
    other.searchParams.set('path', '/etc/passwd')
    assert.equal((await requestAs(envdHost, other.toString())).status, 401)
    // Unsigned and without the access token: refused.
    assert.equal((await requestAs(envdHost, `/files?path=${encodeURIComponent(path)}`)).status, 401)
  })

  // As the SDK builds them, on E2B_SANDBOX_URL, with no sandbox named: the
  // daemon finds the sandbox whose access token signed the URL (E2B's own
  // suite fetches sbx.downloadUrl() as it is).
  it('signed URLs work as the SDK builds them, on E2B_SANDBOX_URL', { timeout: 120_000 }, async () => {
    const dir = await scratch()
    const path = `${dir}/bare.txt`

    const up = await sbx.uploadUrl(path)
    assert.ok(up.startsWith(process.env.E2B_SANDBOX_URL), up)
    const form = new FormData()
    form.append('file', new Blob(['bare upload']), path)
    const put = await fetch(up, { method: 'POST', body: form })
    assert.equal(put.status, 200, await put.text())
    assert.equal(await sbx.files.read(path), 'bare upload')

    const down = await fetch(await sbx.downloadUrl(path, { useSignatureExpiration: 120 }))
    assert.equal(down.status, 200)
    assert.equal(await down.text(), 'bare upload')

    // A signature no sandbox made, or one past its expiration: 401.
    const other = new URL(await sbx.downloadUrl(path))
    other.searchParams.set('path', '/etc/passwd')
    const forged = await fetch(other)
    assert.equal(forged.status, 401)
    assert.equal((await forged.json()).code, 401)
    const late = await fetch(await sbx.downloadUrl(path, { useSignatureExpiration: -10 }))
    assert.equal(late.status, 401)
  })

  // envd 0.6.2: metadata on write, kept as user.e2b.* attributes, read back
  // by getInfo, list and rename; an overwrite replaces it.
  it('file metadata round-trips and is replaced on overwrite', { timeout: 120_000 }, async (t) => {
    if (GVISOR) return t.skip(NO_XATTRS)
    const dir = await scratch()
    const path = `${dir}/report.txt`
    const written = await sbx.files.write(path, 'hello', { metadata: { author: 'alice', purpose: 'demo' } })
    assert.deepEqual(written.metadata, { author: 'alice', purpose: 'demo' })
    const info = await sbx.files.getInfo(path)
    assert.deepEqual(info.metadata, { author: 'alice', purpose: 'demo' })
    // Every EntryInfo field the SDK maps, for a file the default user wrote.
    assert.equal(info.type, FileType.FILE)
    assert.equal(info.size, 5)
    assert.equal(info.mode, 0o644)
    assert.equal(info.permissions, '-rw-r--r--')
    assert.equal(info.owner, 'user')
    assert.equal(info.group, 'user')
    assert.ok(info.modifiedTime instanceof Date && Math.abs(info.modifiedTime - Date.now()) < 120_000)
    assert.equal(info.symlinkTarget, undefined)
    const onDisk = await sbx.commands.run(`getfattr --only-values -n user.e2b.author ${path} 2>/dev/null || python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "user.e2b.author").decode(), end="")' ${path}`)
    assert.equal(onDisk.stdout, 'alice')

    await sbx.commands.run(`ln -s ${path} ${dir}/link`)
    const listed = Object.fromEntries((await sbx.files.list(dir)).map((e) => [e.name, e]))
    assert.deepEqual(listed['report.txt'].metadata, { author: 'alice', purpose: 'demo' })
    assert.equal(listed.link.symlinkTarget, path)
    const moved = await sbx.files.rename(path, `${dir}/renamed.txt`)
    assert.deepEqual(moved.metadata, { author: 'alice', purpose: 'demo' })

    await sbx.files.write(`${dir}/renamed.txt`, 'again', { metadata: { Source: 'import' } })
    assert.deepEqual((await sbx.files.getInfo(`${dir}/renamed.txt`)).metadata, { source: 'import' })
    await sbx.files.write(`${dir}/renamed.txt`, 'plain')
    assert.equal((await sbx.files.getInfo(`${dir}/renamed.txt`)).metadata, undefined)
  })

  // envd 0.6.3: watch events with the entry.
  it('watchDir with includeEntry gives each event its entry', { timeout: 120_000 }, async () => {
    const dir = await scratch()
    const events = []
    const handle = await sbx.files.watchDir(dir, (event) => events.push(event), { includeEntry: true, timeoutMs: 60_000 })
    try {
      // Under gVisor without metadata (NO_XATTRS): the entries all the same.
      await sbx.files.write(`${dir}/seen.txt`, 'entry', GVISOR ? undefined : { metadata: { tag: 'v1' } })
      // The metadata is set after the content, so it shows on the later
      // events (a write, or the attribute change's chmod).
      await waitFor(() => events.some((e) => e.name === 'seen.txt' && (GVISOR ? e.type === FilesystemEventType.WRITE : e.entry?.metadata?.tag === 'v1')), {
        what: `an event whose entry carries the metadata (got ${JSON.stringify(events)})`,
      })
      const ev = events.find((e) => e.name === 'seen.txt' && e.type === FilesystemEventType.WRITE)
      assert.ok(ev?.entry, `a write event with its entry (got ${JSON.stringify(events)})`)
      assert.equal(ev.entry.path, `${dir}/seen.txt`)
      assert.equal(ev.entry.type, FileType.FILE)
      assert.equal(ev.entry.size, 5)
      assert.equal(ev.entry.owner, 'user')
      await sbx.files.remove(`${dir}/seen.txt`)
      const gone = await waitFor(
        () => events.find((e) => e.name === 'seen.txt' && e.type === FilesystemEventType.REMOVE),
        { what: 'a remove event for seen.txt' },
      )
      assert.equal(gone.entry, undefined, 'a removed entry has no entry info')
    } finally {
      await handle.stop()
    }
  })
})
