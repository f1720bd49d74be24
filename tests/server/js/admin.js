// node admin.js '<spec>': one kafkajs admin client runs the spec's calls in order and prints each result.
// spec: {brokers: [host:port], calls: [{call: "createTopics", args: [...]}, ...]}; each call is
// admin[call](...args), e.g. createTopics({topics}), fetchTopicOffsets(topic), fetchTopicOffsetsByTimestamp(topic,
// ts), describeConfigs({resources, includeSynonyms}), deleteTopics({topics}), listTopics().
// Out: {results: [{ok: <result>} | {error: {...}}]}
'use strict'

const { client, errorInfo, main } = require('./common')

main(async (spec) => {
  const admin = client(spec).admin()
  await admin.connect()
  const results = []
  try {
    for (const c of spec.calls) {
      try {
        const value = await admin[c.call](...(c.args || []))
        results.push({ ok: value === undefined ? null : value })
      } catch (err) {
        results.push({ error: errorInfo(err) })
      }
    }
  } finally {
    await admin.disconnect()
  }
  return { results }
})
