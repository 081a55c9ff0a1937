// sandbox.fs through the toolbox: uploadFile/uploadFiles (multipart
// /files/bulk-upload), downloadFile/downloadFiles (multipart
// /files/bulk-download), listFiles, getFileDetails, createFolder, moveFiles,
// deleteFile. Bytes are compared exactly, also from inside the sandbox.

import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'

import { DaytonaNotFoundError } from '@daytonaio/sdk'

import { createSandbox, deleteQuietly, newClient, nonce, sh, shq } from './helpers.js'

const daytona = newClient()

const sha256 = (buf) => createHash('sha256').update(buf).digest('hex')

/** Every byte value, a few times over, then some UTF-8 text. */
const ALL_BYTES = Buffer.concat([
  ...Array.from({ length: 4 }, () => Buffer.from(Array.from({ length: 256 }, (_, i) => i))),
  Buffer.from('\r\n--boundary-lookalike--\r\nÄ ✓\n'),
])

async function assertNotFound(promise) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof DaytonaNotFoundError, `got ${err?.name}: ${err?.message}`)
    return true
  })
}

describe('files', () => {
  let sb
  let localDir
  before(async () => {
    sb = await createSandbox(null, daytona, 'files')
    localDir = await mkdtemp(join(tmpdir(), 'dt-compat-files-'))
  }, { timeout: 180_000 })
  after(async () => {
    if (sb) await deleteQuietly(sb)
    if (localDir) await rm(localDir, { recursive: true, force: true })
  })

  /** A fresh directory path in the sandbox (not created). */
  const remoteDir = (what) => `/tmp/dt-files-${what}-${nonce()}`

  it('uploadFile then downloadFile returns the same bytes; parents are created', { timeout: 60_000 }, async () => {
    const path = `${remoteDir('single')}/nested/deep/blob.bin`
    await sb.fs.uploadFile(ALL_BYTES, path)

    const got = await sb.fs.downloadFile(path)
    assert.ok(Buffer.isBuffer(got), 'downloadFile without a destination returns a Buffer')
    assert.equal(got.length, ALL_BYTES.length)
    assert.ok(got.equals(ALL_BYTES), 'downloaded bytes differ from the uploaded ones')
    // The file really is in the sandbox, byte for byte.
    assert.equal(await sh(sb, `sha256sum < ${shq(path)}`), `${sha256(ALL_BYTES)}  -\n`)

    // Uploading again replaces the content (shorter, so no stale tail).
    await sb.fs.uploadFile(Buffer.from('short\n'), path)
    assert.equal((await sb.fs.downloadFile(path)).toString(), 'short\n')
    assert.equal(await sh(sb, `cat ${shq(path)}`), 'short\n')
  })

  it('a file written by a command downloads intact', { timeout: 60_000 }, async () => {
    const dir = remoteDir('cmd')
    await sh(sb, `mkdir -p ${dir} && printf 'line1\\nline2\\n' > ${dir}/made.txt`)
    assert.equal((await sb.fs.downloadFile(`${dir}/made.txt`)).toString(), 'line1\nline2\n')
  })

  it('uploads from a local path and downloads to a local path', { timeout: 60_000 }, async () => {
    const local = join(localDir, 'source.bin')
    const content = randomBytes(200_000)
    await writeFile(local, content)
    const remote = `${remoteDir('local')}/from-local.bin`
    await sb.fs.uploadFile(local, remote)

    const dest = join(localDir, 'out', 'downloaded.bin')
    await sb.fs.downloadFile(remote, dest)
    assert.ok((await readFile(dest)).equals(content))
  })

  it('uploadFiles and downloadFiles move several files at once, byte-exact', { timeout: 120_000 }, async () => {
    const dir = remoteDir('bulk')
    const big = randomBytes(3 * 1024 * 1024 + 17)
    const files = [
      { destination: `${dir}/a.txt`, source: Buffer.from('alpha\n') },
      { destination: `${dir}/sub/big.bin`, source: big },
      { destination: `${dir}/empty.txt`, source: Buffer.alloc(0) },
      { destination: `${dir}/with space ü ✓.txt`, source: Buffer.from('unicode name\n') },
      { destination: `${dir}/all-bytes.bin`, source: ALL_BYTES },
    ]
    await sb.fs.uploadFiles(files)

    assert.equal(
      await sh(sb, `cd ${dir} && sha256sum sub/big.bin all-bytes.bin && wc -c < empty.txt && cat 'with space ü ✓.txt'`),
      `${sha256(big)}  sub/big.bin\n${sha256(ALL_BYTES)}  all-bytes.bin\n0\nunicode name\n`,
    )

    const results = await sb.fs.downloadFiles(files.map((f) => ({ source: f.destination })))
    assert.equal(results.length, files.length)
    for (const [i, f] of files.entries()) {
      const r = results[i]
      assert.equal(r.source, f.destination)
      assert.equal(r.error, undefined, `${f.destination}: ${r.error}`)
      assert.ok(Buffer.isBuffer(r.result), `${f.destination}: no Buffer`)
      assert.ok(r.result.equals(f.source), `${f.destination}: bytes differ`)
    }

    // Into local files.
    const local = await sb.fs.downloadFiles([
      { source: `${dir}/sub/big.bin`, destination: join(localDir, 'bulk', 'big.bin') },
      { source: `${dir}/a.txt`, destination: join(localDir, 'bulk', 'a.txt') },
    ])
    assert.deepEqual(
      local.map((r) => [r.error, r.result]),
      [
        [undefined, join(localDir, 'bulk', 'big.bin')],
        [undefined, join(localDir, 'bulk', 'a.txt')],
      ],
    )
    assert.ok((await readFile(join(localDir, 'bulk', 'big.bin'))).equals(big))
  })

  it('downloading a missing file fails with DaytonaNotFoundError; in a batch only that entry fails', { timeout: 60_000 }, async () => {
    const dir = remoteDir('missing')
    await sb.fs.uploadFile(Buffer.from('present\n'), `${dir}/present.txt`)
    await assertNotFound(sb.fs.downloadFile(`${dir}/absent.txt`))

    const results = await sb.fs.downloadFiles([{ source: `${dir}/present.txt` }, { source: `${dir}/absent.txt` }])
    assert.equal(results[0].error, undefined)
    assert.equal(results[0].result.toString(), 'present\n')
    assert.equal(results[1].source, `${dir}/absent.txt`)
    assert.equal(results[1].result, undefined)
    assert.equal(typeof results[1].error, 'string')
    assert.match(results[1].error, /\S/)
    assert.equal(results[1].errorDetails?.statusCode, 404)
  })

  it('createFolder with a mode, getFileDetails of folders and files', { timeout: 60_000 }, async () => {
    const dir = remoteDir('folder')
    await sb.fs.createFolder(dir, '755')
    await sb.fs.createFolder(`${dir}/private`, '700')

    const info = await sb.fs.getFileDetails(`${dir}/private`)
    assert.equal(info.name, 'private')
    assert.equal(info.isDir, true)
    assert.equal(Number.parseInt(info.permissions, 8), 0o700, `permissions ${info.permissions}`)
    assert.equal(typeof info.mode, 'string')
    assert.equal(typeof info.owner, 'string')
    assert.equal(typeof info.group, 'string')

    await sb.fs.uploadFile(Buffer.from('12345'), `${dir}/five.txt`)
    const before = Date.now()
    const file = await sb.fs.getFileDetails(`${dir}/five.txt`)
    assert.equal(file.name, 'five.txt')
    assert.equal(file.isDir, false)
    assert.equal(file.size, 5)
    assert.equal(typeof file.permissions, 'string')
    const modTime = Date.parse(file.modTime)
    assert.ok(!Number.isNaN(modTime), `modTime ${file.modTime} is not a date`)
    assert.ok(Math.abs(before - modTime) < 5 * 60_000, `modTime ${file.modTime} is not recent`)

    // Really a directory with that mode, seen from inside.
    // find -printf, not stat or ls: gVisor's statx (Debian's runsc 20221219)
    // refuses AT_NO_AUTOMOUNT, which coreutils 9 always passes (EINVAL).
    assert.equal(await sh(sb, `find ${dir}/private -maxdepth 0 -printf '%y %m\\n'`), 'd 700\n')
    await assertNotFound(sb.fs.getFileDetails(`${dir}/nothing-here`))
  })

  it('listFiles lists a directory', { timeout: 60_000 }, async () => {
    const dir = remoteDir('list')
    await sb.fs.uploadFiles([
      { destination: `${dir}/one.txt`, source: Buffer.from('1') },
      { destination: `${dir}/three.txt`, source: Buffer.from('333') },
      { destination: `${dir}/sub/inner.txt`, source: Buffer.from('inner') },
    ])
    const entries = await sb.fs.listFiles(dir)
    assert.ok(Array.isArray(entries))
    const byName = Object.fromEntries(entries.map((e) => [e.name, e]))
    assert.deepEqual(Object.keys(byName).sort(), ['one.txt', 'sub', 'three.txt'])
    assert.equal(byName['one.txt'].isDir, false)
    assert.equal(byName['one.txt'].size, 1)
    assert.equal(byName['three.txt'].size, 3)
    assert.equal(byName.sub.isDir, true)
    for (const e of entries) {
      assert.equal(typeof e.mode, 'string')
      assert.equal(typeof e.permissions, 'string')
      assert.ok(!Number.isNaN(Date.parse(e.modTime)), `${e.name}: modTime ${e.modTime}`)
    }
    await assertNotFound(sb.fs.listFiles(`${dir}/no-such-dir`))
  })

  it('moveFiles renames files and directories', { timeout: 60_000 }, async () => {
    const dir = remoteDir('move')
    await sb.fs.uploadFiles([
      { destination: `${dir}/src.txt`, source: Buffer.from('moving\n') },
      { destination: `${dir}/tree/leaf.txt`, source: Buffer.from('leaf\n') },
    ])
    await sb.fs.moveFiles(`${dir}/src.txt`, `${dir}/dst.txt`)
    assert.equal((await sb.fs.downloadFile(`${dir}/dst.txt`)).toString(), 'moving\n')
    await assertNotFound(sb.fs.getFileDetails(`${dir}/src.txt`))

    await sb.fs.moveFiles(`${dir}/tree`, `${dir}/moved-tree`)
    assert.equal((await sb.fs.downloadFile(`${dir}/moved-tree/leaf.txt`)).toString(), 'leaf\n')
    await assertNotFound(sb.fs.getFileDetails(`${dir}/tree`))
  })

  it('deleteFile removes a file, and a directory with recursive', { timeout: 60_000 }, async () => {
    const dir = remoteDir('delete')
    await sb.fs.uploadFiles([
      { destination: `${dir}/gone.txt`, source: Buffer.from('x') },
      { destination: `${dir}/tree/a/b.txt`, source: Buffer.from('y') },
    ])
    await sb.fs.deleteFile(`${dir}/gone.txt`)
    await assertNotFound(sb.fs.getFileDetails(`${dir}/gone.txt`))

    await sb.fs.deleteFile(`${dir}/tree`, true)
    await assertNotFound(sb.fs.getFileDetails(`${dir}/tree`))
    assert.deepEqual((await sb.fs.listFiles(dir)).map((e) => e.name), [])
  })
})
