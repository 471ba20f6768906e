// kinesalite, the Kinesis API emulator, bound to 127.0.0.1 for millstream's tests and benchmarks.
//
//   node server.js [--port N] [--host 127.0.0.1]   (port 0: a free one)
//
// Why a wrapper: kinesalite's command line always listens on every interface (it has no --host), and
// tests must not expose a server beyond the machine. Once listening it prints one line,
// "kinesalite listening on 127.0.0.1:<port>", which the harness waits for.
//
// Streams are created, resharded and deleted at once (kinesalite's CREATING / UPDATING / DELETING
// delays are 0 here instead of 500 ms): the delay only slows tests down, and the code under test waits
// for ACTIVE anyway.
//
// Two emulator bugs are fixed here, not worked around in millstream. The first: kinesalite's
// GetShardIterator with AT_TIMESTAMP never answers when no record of the shard arrived at or after the
// timestamp (the request hangs until the client times out). Real Kinesis returns an iterator at the shard's tip, which is what
// LATEST returns, so that is what the patch answers in that case.
//
// The second: kinesalite throws from a request's 'error' event, and Node raises one when a client
// goes away before its request's body ended (ECONNRESET, "aborted"). A test that kills a container
// mid-request then killed the emulator every other container was reading from. Real Kinesis drops
// such a request and serves on, so the patch drops it too; any other request error still throws.
'use strict'

const path = require('path')

function parseArgs(argv) {
  const options = {port: 0, host: '127.0.0.1'}
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    if (arg === '--port') options.port = parseInt(argv[++i], 10)
    else if (arg === '--host') options.host = argv[++i]
    else {
      console.error('usage: node server.js [--port N] [--host 127.0.0.1]')
      process.exit(2)
    }
  }
  return options
}

function patchAtTimestamp() {
  const actionPath = require.resolve('kinesalite/actions/getShardIterator')
  const db = require(path.join(path.dirname(actionPath), '..', 'db'))
  const original = require(actionPath)

  function getShardIterator(store, data, cb) {
    if (data.ShardIteratorType !== 'AT_TIMESTAMP' || data.Timestamp == null || data.Timestamp * 1000 > Date.now()) {
      return original(store, data, cb)
    }
    let shardIx
    try {
      shardIx = db.resolveShardId(data.ShardId).shardIx
    } catch (e) {
      return original(store, data, cb)
    }
    store.getStream(data.StreamName, function(err, stream) {
      if (err || shardIx >= stream.Shards.length) return original(store, data, cb)
      let found = false
      const records = store.getStreamDb(data.StreamName).createReadStream({
        gt: db.shardIxToHex(shardIx),
        lt: db.shardIxToHex(shardIx + 1),
      })
      records.on('data', function(item) {
        if (!found && item.value.ApproximateArrivalTimestamp >= data.Timestamp) found = true
      })
      records.on('error', function(error) { if (!found) { found = true; cb(error) } })
      records.on('end', function() {
        if (found) return original(store, data, cb)
        const latest = Object.assign({}, data, {ShardIteratorType: 'LATEST'})
        delete latest.Timestamp
        original(store, latest, cb)
      })
    })
  }

  require.cache[actionPath].exports = getShardIterator
}

function dropAbortedRequests(server) {
  const handlers = server.listeners('request')
  server.removeAllListeners('request')
  server.on('request', function(req, res) {
    for (const handler of handlers) handler.call(server, req, res)
    // kinesalite's handler added its throwing listener synchronously, and the event comes later.
    const rethrow = req.listeners('error')
    req.removeAllListeners('error')
    req.on('error', function(err) {
      if (err.code === 'ECONNRESET') return
      for (const listener of rethrow) listener.call(req, err)
    })
  })
}

const options = parseArgs(process.argv.slice(2))
patchAtTimestamp()
const kinesalite = require('kinesalite')
const server = kinesalite({createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 1000})
dropAbortedRequests(server)
server.listen(options.port, options.host, function() {
  const address = server.address()
  console.log('kinesalite listening on ' + address.address + ':' + address.port)
})
// The signal is printed so that a harness reporting an emulator that died can tell a stop from a crash.
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, function() {
    console.log('kinesalite: ' + signal + ' received, exiting')
    process.exit(0)
  })
}
