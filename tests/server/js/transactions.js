// node transactions.js '<spec>': one kafkajs transactional producer runs the spec's transactions in order, each
// sending its messages (and, with `offsets`, the group offsets of sendOffsets), then committing or aborting it.
// spec: {brokers: [host:port], transactionalId, transactions: [{end: "commit"|"abort", topic,
//        messages: [{key, value, partition}], offsets: {groupId, topic, partitions: [{partition, offset}]}}]}
// Out: {results: [{sent: [{topicName, partition, errorCode, baseOffset}], ended: "commit"|"abort"} |
//       {error: {...}, step}]}: an error stops the run (kafkajs cannot go on with a transaction it failed).
'use strict'

const { client, errorInfo, main } = require('./common')

main(async (spec) => {
  const producer = client(spec).producer({
    transactionalId: spec.transactionalId,
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
  })
  await producer.connect()
  const results = []
  try {
    for (const t of spec.transactions) {
      let step = 'begin'
      try {
        const txn = await producer.transaction()
        step = 'send'
        const sent = await txn.send({
          topic: t.topic,
          acks: -1,
          messages: t.messages.map((m) => ({ key: m.key, value: m.value, partition: m.partition })),
        })
        if (t.offsets) {
          step = 'sendOffsets'
          await txn.sendOffsets({
            consumerGroupId: t.offsets.groupId,
            topics: [{ topic: t.offsets.topic,
                       partitions: t.offsets.partitions.map((p) => ({ partition: p.partition,
                                                                      offset: String(p.offset) })) }],
          })
        }
        step = t.end
        if (t.end === 'commit') await txn.commit()
        else await txn.abort()
        results.push({ sent, ended: t.end })
      } catch (err) {
        results.push({ error: errorInfo(err), step })
        break
      }
    }
  } finally {
    await producer.disconnect()
  }
  return { results }
})
