// node consume_group.js '<spec>': one kafkajs consumer of a consumer group processes the first `count` messages
// it is given, commits the offset after the last processed one of each partition, leaves the group and prints
// what it processed.
// spec: {brokers: [host:port], groupId, topic, count, fromBeginning: bool (default true),
//        sessionTimeout, heartbeatInterval, rebalanceTimeout, timeoutMs}
// Out: {processed: [{partition, offset, key, value}], committed: [{partition, offset}],
//       fetchedAtStart: [{partition, offset}]}: offsets are numbers; `fetchedAtStart` is the group's committed
//       offsets as kafkajs's admin saw them before the consumer joined (-1: none).
// autoCommit is off: only what was processed is committed, once, by commitOffsets.
'use strict'

const { client, main } = require('./common')

main(async (spec) => {
  const kafka = client(spec)
  const admin = kafka.admin()
  await admin.connect()
  let fetchedAtStart
  try {
    const [entry] = await admin.fetchOffsets({ groupId: spec.groupId, topics: [spec.topic] })
    fetchedAtStart = entry.partitions.map((p) => ({ partition: p.partition, offset: Number(p.offset) }))
      .sort((a, b) => a.partition - b.partition)
  } finally {
    await admin.disconnect()
  }

  const consumer = kafka.consumer({
    groupId: spec.groupId,
    sessionTimeout: spec.sessionTimeout || 6000,
    heartbeatInterval: spec.heartbeatInterval || 500,
    rebalanceTimeout: spec.rebalanceTimeout || 10000,
    maxWaitTimeInMs: 200,
    allowAutoTopicCreation: false,
  })
  const processed = []
  const next = new Map()          // partition -> offset after the last processed message
  let finish
  const done = new Promise((resolve) => { finish = resolve })
  const timer = setTimeout(() => finish(new Error(`only ${processed.length} of ${spec.count} messages in time`)),
    spec.timeoutMs || 60000)

  await consumer.connect()
  try {
    await consumer.subscribe({ topic: spec.topic, fromBeginning: spec.fromBeginning !== false })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (processed.length >= spec.count) return        // delivered after the last one wanted: not processed
        const offset = Number(message.offset)
        processed.push({ partition, offset, key: message.key && message.key.toString(),
                         value: message.value && message.value.toString() })
        next.set(partition, offset + 1)
        if (processed.length === spec.count) finish(null)
      },
    })
    const failure = await done
    clearTimeout(timer)
    if (failure) throw failure
    const committed = [...next.entries()].sort((a, b) => a[0] - b[0])
      .map(([partition, offset]) => ({ partition, offset }))
    await consumer.commitOffsets(committed.map(({ partition, offset }) => (
      { topic: spec.topic, partition, offset: String(offset) })))
    return { processed, committed, fetchedAtStart }
  } finally {
    clearTimeout(timer)
    await consumer.disconnect()
  }
})
