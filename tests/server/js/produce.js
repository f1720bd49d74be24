// node produce.js '<spec>': one kafkajs producer sends the spec's requests in order and prints the results.
// spec: {brokers: [host:port], idempotent: bool, requests: [{topic, acks, compression: "none"|"gzip",
//        messages: [{key, value, partition, timestamp, headers: {name: value}}]}]}
// Out: {results: [{ok: [{topicName, partition, errorCode, baseOffset, logStartOffset}]} | {error: {...}}]}
// kafkajs compresses with gzip out of the box; snappy, lz4 and zstd need codec plugins (kafkajs-snappy,
// kafkajs-lz4, @kafkajs/zstd) registered in CompressionCodecs, so those codecs are not driven from here.
'use strict'

const { CompressionTypes } = require('kafkajs')
const { client, errorInfo, main } = require('./common')

const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }

main(async (spec) => {
  const producer = client(spec).producer(spec.idempotent
    ? { idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: true }
    : { allowAutoTopicCreation: true })
  await producer.connect()
  const results = []
  try {
    for (const req of spec.requests) {
      try {
        const ok = await producer.send({
          topic: req.topic,
          acks: req.acks,
          compression: CODECS[req.compression || 'none'],
          messages: req.messages.map((m) => ({
            key: m.key === undefined ? null : m.key,
            value: m.value === undefined ? null : m.value,
            partition: m.partition,
            timestamp: m.timestamp === undefined ? undefined : String(m.timestamp),
            headers: m.headers || {},
          })),
        })
        results.push({ ok })
      } catch (err) {
        results.push({ error: errorInfo(err) })
      }
    }
  } finally {
    await producer.disconnect()
  }
  return { results }
})
