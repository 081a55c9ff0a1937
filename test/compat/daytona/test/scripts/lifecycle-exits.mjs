// A script as a user writes it: one Daytona client, never disposed; create,
// stop, start, delete. It prints one JSON line when its last call returned
// ({done: <ms since epoch>, id, connected}) and must then exit by itself.
// events.test.js runs it as a child process and times the exit.
//
//   LABELS='{"suite":...}' node lifecycle-exits.mjs

import { Daytona } from '@daytonaio/sdk'

const daytona = new Daytona()
const sandbox = await daytona.create({ labels: JSON.parse(process.env.LABELS || '{}') }, { timeout: 120 })
await sandbox.stop(120)
await sandbox.start(120)
await sandbox.waitUntilStarted(120)
await sandbox.delete(60)
// Whether the SDK's event stream (socket.io) is connected, read from its
// dispatcher: a served stream is what lets the process exit.
const connected = Boolean(daytona.eventDispatcher?.isConnected)
console.log(JSON.stringify({ done: Date.now(), id: sandbox.id, state: sandbox.state, connected }))
