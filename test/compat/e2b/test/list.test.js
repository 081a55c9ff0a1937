// Sandbox.list through the real SDK's SandboxPaginator: order (E2B lists
// newest first), template and startedAfter filters, and paging one sandbox
// at a time across running and paused sandboxes (as E2B's own
// tests/api/list.test.ts does).

import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { Sandbox } from 'e2b'

import { BASE, RUN_ID, createSandbox, listAll } from './helpers.js'

/** Creates one sandbox after another, so their start times are ordered. */
async function createInOrder(t, test, n, opts = {}) {
  const out = []
  for (let i = 0; i < n; i++) {
    out.push(await createSandbox(t, test, { ...opts, metadata: { i: String(i) } }))
  }
  return out
}

describe('list', { concurrency: true }, () => {
  it('lists newest first by default, oldest first with order asc', { timeout: 180_000 }, async (t) => {
    const [a, b, c] = await createInOrder(t, 'list-order', 3)
    const query = { metadata: { run: RUN_ID, test: 'list-order' } }
    const newest = await listAll({ query })
    assert.deepEqual(newest.map((s) => s.sandboxId), [c.sandboxId, b.sandboxId, a.sandboxId])
    const desc = await listAll({ query, order: 'desc' })
    assert.deepEqual(desc.map((s) => s.sandboxId), [c.sandboxId, b.sandboxId, a.sandboxId])
    const asc = await listAll({ query, order: 'asc' })
    assert.deepEqual(asc.map((s) => s.sandboxId), [a.sandboxId, b.sandboxId, c.sandboxId])
  })

  it('filters on template and startedAfter', { timeout: 180_000 }, async (t) => {
    const [a, b] = await createInOrder(t, 'list-template-time', 2)
    const query = { metadata: { run: RUN_ID, test: 'list-template-time' } }
    const base = await listAll({ query: { ...query, template: BASE } })
    assert.deepEqual(base.map((s) => s.sandboxId), [b.sandboxId, a.sandboxId])
    const other = await listAll({ query: { ...query, template: 'code-interpreter-v1' } })
    assert.deepEqual(other, [])

    const infoB = await b.getInfo()
    const after = await listAll({ query: { ...query, startedAfter: infoB.startedAt } })
    assert.deepEqual(after.map((s) => s.sandboxId), [b.sandboxId])
    const future = await listAll({ query: { ...query, startedAfter: new Date(Date.now() + 3_600_000) } })
    assert.deepEqual(future, [])
  })

  it('paginates one at a time across running and paused sandboxes', { timeout: 180_000 }, async (t) => {
    const [older, newer] = await createInOrder(t, 'list-paginate', 2)
    assert.equal(await newer.pause(), true)

    const paginator = Sandbox.list({
      limit: 1,
      query: { metadata: { run: RUN_ID, test: 'list-paginate' }, state: ['running', 'paused'] },
    })
    const first = await paginator.nextItems()
    assert.equal(first.length, 1)
    assert.equal(first[0].sandboxId, newer.sandboxId)
    assert.equal(first[0].state, 'paused')
    assert.equal(paginator.hasNext, true)
    assert.notEqual(paginator.nextToken, undefined)

    const second = await paginator.nextItems()
    assert.equal(second.length, 1)
    assert.equal(second[0].sandboxId, older.sandboxId)
    assert.equal(second[0].state, 'running')
    assert.equal(paginator.hasNext, false)
    assert.equal(paginator.nextToken, undefined)
  })
})
