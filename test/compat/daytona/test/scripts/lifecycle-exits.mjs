// A script as a user writes it: one Daytona client, never disposed; create,
// stop, get, start, delete. It prints one JSON line when its last call returned
// ({done: <ms since epoch>, id, connected}) and must then exit by itself.
// events.test.js runs it as a child process and times the exit.
//
//   LABELS='{"suite":...}' node lifecycle-exits.mjs

import { Daytona } from '@daytonaio/sdk'

const daytona = new Daytona()
const sandbox = await daytona.create({ labels: JSON.parse(process.env.LABELS || '{}') }, { timeout: 120 })
await sandbox.stop(120)
// A second handle on the same sandbox, as examples get one (daytona.get):
// it subscribes to the sandbox's events too, and deleting through the
// first handle leaves it subscribed. Against a refused event stream that
// subscription kept socket.io's reconnect timers, and Node, alive for
// minutes.
const again = await daytona.get(sandbox.id)
await again.start(120)
await again.waitUntilStarted(120)
await sandbox.delete(60)
// Whether the SDK's event stream (socket.io) is connected, read from its
// dispatcher: a served stream is what lets the process exit.
const connected = Boolean(daytona.eventDispatcher?.isConnected)
console.log(JSON.stringify({ done: Date.now(), id: sandbox.id, state: sandbox.state, connected }))
