#!/usr/bin/env node
// Calling imgstat from Node.js: an encoded image in one call, a raw pixel
// buffer streamed in chunks, the image under a mask and per label of a label
// image, and many images on one batch call.
//
//   cd examples/node && npm install
//   node imgstat_example.js localhost:50051 photo.png --raw frame.raw 4096x3072x1:uint16 \
//     --mask mask.png --labels labels.png --batch a.png b.jpg
//
// The server may be one address, a comma-separated list of servers
// (host1:50051,host2:50051) or a dns:/// name that resolves to many (a
// Kubernetes headless Service): calls then go to each in turn (round_robin).
//
// Prints one JSON object per answer, with the proto's field names.
'use strict';
const dns = require('dns');
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// The loader options imgstat.proto needs: keepCase for the proto's field
// names; longs as strings, since counts and sums pass 2^53; enums by name;
// defaults so that zero values appear; oneofs to say which part a message
// holds. The Duration import resolves from protobufjs's bundled
// google/protobuf files; includeDirs finds imgstat/v1/imgstat.proto.
const PROTO_DIR = process.env.IMGSTAT_PROTO_DIR || path.join(__dirname, '..', '..', 'proto');
const definition = protoLoader.loadSync('imgstat/v1/imgstat.proto', {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
});
const v1 = grpc.loadPackageDefinition(definition).imgstat.v1;

const CHUNK = 1 << 20; // bytes per streamed message
// Every statistic, with the 1st and 99th percentiles besides the median.
const OPTIONS = { statistics: ['STATISTIC_ALL'], percentiles: [1, 99] };
const deadline = (seconds) => ({ deadline: new Date(Date.now() + seconds * 1000) });
// Calls spread over every address the target names (pick_first, the
// default, would put them all on one server), retried by gRPC when they
// never reached one; keep-alive pings notice a server that vanished.
const CHANNEL_OPTIONS = {
  'grpc.max_receive_message_length': 64 << 20, // histograms: up to 65536 bins per channel
  'grpc.service_config': JSON.stringify({
    loadBalancingConfig: [{ round_robin: {} }],
    methodConfig: [{
      // Unary methods only: a stream that ends UNAVAILABLE is best started
      // again by the caller, who knows which of its inputs were answered.
      name: ['Analyze', 'GetServerInfo', 'RegisterRegion', 'ListRegions', 'UnregisterRegion']
        .map((method) => ({ service: 'imgstat.v1.ImageStats', method })),
      retryPolicy: { maxAttempts: 4, initialBackoff: '0.05s', maxBackoff: '1s', backoffMultiplier: 2,
        retryableStatusCodes: ['UNAVAILABLE'] },
    }],
  }),
  'grpc.keepalive_time_ms': 10000,
  'grpc.keepalive_timeout_ms': 5000,
  'grpc.keepalive_permit_without_calls': 1,
};

// gRPC's ipv4:/ipv6: targets list addresses, not names: a list of names is resolved here.
async function channelTarget(server) {
  if (!server.includes(',') || /^(dns|ipv4|ipv6|unix):/.test(server)) return server;
  const v4 = [];
  const v6 = [];
  for (const entry of server.split(',')) {
    const at = entry.lastIndexOf(':');
    const host = entry.slice(0, at).replace(/^\[|\]$/g, '');
    const port = entry.slice(at + 1);
    const found = await dns.promises.lookup(host, { all: true });
    const four = found.find((a) => a.family === 4);
    if (four) {
      v4.push(`${four.address}:${port}`);
      v6.push(`[::ffff:${four.address}]:${port}`);
    } else {
      v6.push(`[${found[0].address}]:${port}`);
    }
  }
  return v4.length === v6.length ? `ipv4:${v4.join(',')}` : `ipv6:${v6.join(',')}`;
}

function analyzeFile(client, file) {
  const request = { input: { kind: 'INPUT_KIND_ENCODED', data: fs.readFileSync(file), name: file }, options: OPTIONS };
  return new Promise((resolve, reject) =>
    client.Analyze(request, deadline(60), (err, response) => (err ? reject(err) : resolve(response))));
}

// A raw buffer of any size: a StreamHeader, then the bytes in order, read
// from the file as the call can take them.
function analyzeRawStreamed(client, file, [width, height, channels, sampleType]) {
  return new Promise((resolve, reject) => {
    const call = client.AnalyzeStream(deadline(60), (err, response) => (err ? reject(err) : resolve(response)));
    call.write({
      header: {
        input: { kind: 'INPUT_KIND_RAW', name: file, raw: { width, height, channels, sample_type: sampleType } },
        options: OPTIONS,
        total_bytes: String(fs.statSync(file).size),
      },
    });
    const source = fs.createReadStream(file, { highWaterMark: CHUNK });
    source.on('data', (chunk) => {
      if (!call.write({ chunk })) {
        source.pause();
        call.once('drain', () => source.resume());
      }
    });
    source.on('end', () => call.end());
    source.on('error', (err) => call.cancel() || reject(err));
  });
}

// Many images on one call; answers come as they complete, matched by id.
function analyzeBatch(client, files) {
  return new Promise((resolve, reject) => {
    const answers = [];
    const call = client.AnalyzeBatch(deadline(120));
    call.on('data', (answer) => answers.push({ file: files[Number(answer.id)], answer }));
    call.on('error', reject);
    call.on('end', () => resolve(answers));
    files.forEach((file, i) => call.write({
      id: String(i),
      request: { input: { kind: 'INPUT_KIND_ENCODED', data: fs.readFileSync(file), name: file }, options: OPTIONS },
    }));
    call.end();
  });
}

function parseLayout(spec) {
  const m = /^(\d+)x(\d+)x(\d+):(\w+)$/.exec(spec);
  if (!m) throw new Error(`layout wants WxHxC:TYPE, got ${spec}`);
  return [Number(m[1]), Number(m[2]), Number(m[3]), `SAMPLE_TYPE_${m[4].toUpperCase()}`];
}

// The image under a mask (nonzero pixels count), or per label of a label
// image (0, the background, left out): the map travels in the same call.
function analyzeParts(client, file, { mask, labels }) {
  const parts = mask
    ? { mask: { image: { data: fs.readFileSync(mask) } } }
    : { labels: { image: { data: fs.readFileSync(labels) }, ignore: 0 } };
  const request = {
    input: { kind: 'INPUT_KIND_ENCODED', data: fs.readFileSync(file), name: file },
    options: { ...OPTIONS, parts },
  };
  return new Promise((resolve, reject) => {
    client.Analyze(request, deadline(60), (err, r) => (err ? reject(err) : resolve(r)));
  });
}

function emit(method, file, response, error) {
  const line = { method, file };
  if (response) line.response = response;
  if (error) line.error = { code: Object.keys(grpc.status).find((k) => grpc.status[k] === error.code), message: error.message };
  console.log(JSON.stringify(line));
}

async function main(argv) {
  const [server, image, ...rest] = argv;
  const raw = rest[0] === '--raw' ? rest.slice(1, 3) : null;
  const flag = (name) => (rest.indexOf(name) >= 0 ? rest[rest.indexOf(name) + 1] : null);
  const mask = flag('--mask');
  const labels = flag('--labels');
  const batchAt = rest.indexOf('--batch');
  const batch = batchAt >= 0 ? rest.slice(batchAt + 1) : [];
  const client = new v1.ImageStats(await channelTarget(server), grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
  let failed = false;
  try {
    emit('Analyze', image, await analyzeFile(client, image));
    if (raw) emit('AnalyzeStream', raw[0], await analyzeRawStreamed(client, raw[0], parseLayout(raw[1])));
    if (mask) emit('AnalyzeMask', image, await analyzeParts(client, image, { mask }));
    if (labels) emit('AnalyzeLabels', image, await analyzeParts(client, image, { labels }));
    for (const { file, answer } of await analyzeBatch(client, batch)) {
      failed = failed || answer.result === 'error';
      emit('AnalyzeBatch', file, answer.response, answer.error);
    }
  } catch (err) {
    console.error(`imgstat: ${err.code !== undefined ? grpc.status[err.code] : ''}: ${err.details || err.message}`);
    return 1;
  } finally {
    client.close();
  }
  return failed ? 1 : 0;
}

main(process.argv.slice(2)).then((code) => process.exit(code));
