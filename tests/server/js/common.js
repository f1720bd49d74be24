// Shared by the kafkajs scripts the client tests run: the client, logging to stderr (stdout carries only the
// JSON result), and errors turned into plain objects.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

function stderrLogger() {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`${label} ${namespace}: ${message} ${JSON.stringify(extra)}\n`)
  }
}

function client(spec) {
  return new Kafka({
    clientId: 'storage-engine-tests',
    brokers: spec.brokers,
    logLevel: logLevel.WARN,
    logCreator: stderrLogger,
    retry: { retries: spec.retries === undefined ? 5 : spec.retries, initialRetryTime: 100 },
    connectionTimeout: 10000,
    requestTimeout: 30000,
  })
}

function errorInfo(err) {
  return {
    name: err.name,
    type: err.type || null,
    code: err.code === undefined ? null : err.code,
    message: err.message,
    retriable: Boolean(err.retriable),
  }
}

async function main(run) {
  const spec = JSON.parse(process.argv[2])
  try {
    const out = await run(spec)
    process.stdout.write(JSON.stringify(out) + '\n')
  } catch (err) {
    process.stderr.write(`${err.stack || err}\n`)
    process.stdout.write(JSON.stringify({ fatal: errorInfo(err) }) + '\n')
    process.exitCode = 1
  }
}

module.exports = { client, errorInfo, main }
