// A consumer group of two KafkaJS consumers on a ringstream cluster, driven by kafkajs_test.go.
// Phase 1: consumers A and B join group GROUP on TOPIC; once both hold partitions, a producer writes
// N records. Phase 2: once every record was read, B disconnects (it commits, then leaves the group),
// the producer writes N more, and A, now holding every partition, reads them from the offsets B
// committed. Every record read is printed to stdout as one JSON line; the test checks them.
const { Kafka, logLevel } = require('kafkajs')

const env = (k) => {
  const v = process.env[k]
  if (!v) throw new Error(`${k} is not set`)
  return v
}
const brokers = env('BROKERS').split(',')
const topic = env('TOPIC')
const groupId = env('GROUP')
const n = Number(env('N'))

const kafka = new Kafka({
  clientId: 'ringstream-kafkajs-test',
  brokers,
  sasl: { mechanism: 'plain', username: 'ringstream', password: env('PASSWORD') },
  logLevel: logLevel.WARN,
  retry: { retries: 20, initialRetryTime: 100, maxRetryTime: 1000 },
})

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n')
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const until = async (what, f, ms = 30000) => {
  const end = Date.now() + ms
  while (!f()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

let read = 0
let leftAt = 0
const assigned = { A: [], B: [] }
const consumer = (name) => {
  const c = kafka.consumer({
    groupId,
    sessionTimeout: 10000,
    rebalanceTimeout: 10000,
    heartbeatInterval: 300,
    maxWaitTimeInMs: 200,
  })
  c.on(c.events.GROUP_JOIN, (e) => {
    assigned[name] = (e.payload.memberAssignment[topic] || []).slice().sort()
    out({ ev: 'join', c: name, partitions: assigned[name], afterLeaveMs: leftAt ? Date.now() - leftAt : -1 })
  })
  return c
}

const main = async () => {
  const producer = kafka.producer()
  await producer.connect()
  const a = consumer('A')
  const b = consumer('B')
  for (const [name, c] of [['A', a], ['B', b]]) {
    await c.connect()
    await c.subscribe({ topic, fromBeginning: true })
    await c.run({
      eachMessage: async ({ partition, message }) => {
        read++
        out({ ev: 'msg', c: name, p: partition, o: Number(message.offset), k: message.key.toString(), v: message.value.toString() })
      },
    })
  }
  await until('both consumers holding partitions', () =>
    assigned.A.length > 0 && assigned.B.length > 0 && assigned.A.length + assigned.B.length === 4)
  const send = async (from) => {
    for (let i = from; i < from + n; i += 100) {
      const messages = []
      for (let j = i; j < Math.min(i + 100, from + n); j++) messages.push({ key: `k${j}`, value: `v${j}` })
      await producer.send({ topic, acks: -1, messages })
    }
  }
  await send(0)
  await until(`${n} records read`, () => read >= n)
  await sleep(300) // any duplicate of phase 1 would show here
  leftAt = Date.now()
  await b.disconnect() // commits B's offsets, then LeaveGroup
  out({ ev: 'left', c: 'B' })
  await send(n)
  await until(`${2 * n} records read`, () => read >= 2 * n)
  await until('A holding every partition', () => assigned.A.length === 4)
  await sleep(300)
  await a.disconnect()
  await producer.disconnect()
  out({ ev: 'done' })
}

const deadline = setTimeout(() => {
  console.error('groups.js: not done within 60 s')
  process.exit(2)
}, 60000)
main().then(() => {
  clearTimeout(deadline)
  process.exit(0)
}, (err) => {
  console.error('groups.js:', err)
  process.exit(1)
})
