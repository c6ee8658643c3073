// Checks Kubernetes manifests against Kubernetes' own OpenAPI schemas (the
// kubernetes-models package, v1.27) and against the server they deploy:
//
//   node check.mjs SERVER_HELP METRICS MANIFEST...
//
// SERVER_HELP is `imgstat-server --help`, METRICS a scrape of its /metrics.
// Beyond the schemas: selectors that find their workloads' pods (the
// server's Deployment or DaemonSet, and a Dask cluster's beside it), ports
// the probes and Services name, environment variables the server reads,
// threads and decode memory that follow the resources, a headless or
// node-local Service for the server, the autoscaler's metric one the server
// exports. Prints each problem; exit 1 when there is any.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { DaemonSet, Deployment } from "kubernetes-models/apps/v1";
import { Service } from "kubernetes-models/v1";
import { HorizontalPodAutoscaler } from "kubernetes-models/autoscaling/v2";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";

const models = {
  "apps/v1 Deployment": Deployment,
  "apps/v1 DaemonSet": DaemonSet,
  "v1 Service": Service,
  "autoscaling/v2 HorizontalPodAutoscaler": HorizontalPodAutoscaler,
  "policy/v1 PodDisruptionBudget": PodDisruptionBudget,
};

const [help, metrics, ...files] = process.argv.slice(2);
const serverHelp = readFileSync(help, "utf8");
const metricNames = new Set(
  readFileSync(metrics, "utf8").split("\n").filter((l) => l.startsWith("# TYPE ")).map((l) => l.split(" ")[2]),
);
const problems = [];
const problem = (file, what) => problems.push(`${file}: ${what}`);

const bytes = (q) => {
  const m = /^(\d+)(Ki|Mi|Gi|Ti)?$/.exec(String(q));
  if (!m) return NaN;
  return Number(m[1]) * { undefined: 1, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 }[m[2]];
};
const matches = (selector, labels) => Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);

for (const file of files) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"));
  const objects = [];
  for (const doc of docs) {
    if (doc.errors.length) {
      problem(file, `YAML: ${doc.errors[0].message}`);
      continue;
    }
    const obj = doc.toJS();
    if (!obj) continue;
    const Model = models[`${obj.apiVersion} ${obj.kind}`];
    if (!Model) {
      problem(file, `${obj.apiVersion} ${obj.kind}: not a kind this check knows`);
      continue;
    }
    try {
      new Model(obj).validate();
    } catch (e) {
      problem(file, `${obj.kind} ${obj.metadata?.name}: ${e.message}`);
    }
    objects.push(obj);
  }
  const of = (kind) => objects.filter((o) => o.kind === kind);
  // The server's workload (a Deployment, or a DaemonSet of one a node) and
  // any beside it (a Dask scheduler and workers): each selects its pods and
  // probes ports its containers open; the server's container is checked
  // against the server.
  const workloads = objects.filter((o) => o.kind === "Deployment" || o.kind === "DaemonSet");
  const podsOf = (w) => w.spec?.template ?? {};
  const server = workloads.find((w) => (podsOf(w).spec?.containers ?? []).some((c) => c.name === "imgstat-server"));
  if (!server) {
    problem(file, "no Deployment or DaemonSet runs the imgstat-server container");
    continue;
  }
  const labels = podsOf(server).metadata?.labels;
  for (const w of workloads) {
    const pod = podsOf(w);
    if (!matches(w.spec?.selector?.matchLabels, pod.metadata?.labels))
      problem(file, `the ${w.kind} ${w.metadata?.name}'s selector misses its pods`);
    for (const c of pod.spec?.containers ?? []) {
      const ports = new Map((c.ports ?? []).map((p) => [p.name, p.containerPort]));
      const known = (p) => ports.has(p) || [...ports.values()].includes(p);
      for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        const port = c[probe]?.grpc?.port ?? c[probe]?.tcpSocket?.port ?? c[probe]?.httpGet?.port;
        if (c[probe] && !known(port)) problem(file, `${probe} asks port ${port}, which the container does not open`);
      }
      if (c.name !== "imgstat-server") continue;
      const env = new Map();
      for (const e of c.env ?? []) {
        if (env.has(e.name)) problem(file, `${e.name} set twice`);
        env.set(e.name, e.value);
        if (e.name.startsWith("IMGSTAT_") && !serverHelp.includes(`(Env:${e.name})`))
          problem(file, `${e.name}: imgstat-server reads no such variable`);
      }
      const requests = c.resources?.requests ?? {};
      const limits = c.resources?.limits ?? {};
      if (env.get("IMGSTAT_THREADS") !== String(requests.cpu))
        problem(file, `IMGSTAT_THREADS (${env.get("IMGSTAT_THREADS")}) is not the cores requested (${requests.cpu})`);
      const memory = bytes(limits.memory);
      const budget = Number(env.get("IMGSTAT_MAX_DECODE_MEMORY"));
      if (!(budget > 0 && budget <= memory / 2))
        problem(file, `IMGSTAT_MAX_DECODE_MEMORY (${budget}) is not within half the memory limit (${limits.memory})`);
      if (bytes(requests.memory) !== memory) problem(file, "memory request and limit differ: the budget assumes the limit");
      const gpus = Number(limits["nvidia.com/gpu"] ?? 0);
      if ((env.get("IMGSTAT_ENGINE") === "cuda") !== gpus > 0) problem(file, "IMGSTAT_ENGINE and nvidia.com/gpu disagree");
    }
  }
  for (const s of of("Service")) {
    const selected = workloads.filter((w) => matches(s.spec?.selector, podsOf(w).metadata?.labels));
    if (selected.length === 0) {
      problem(file, `Service ${s.metadata.name} selects no pod of the Deployment or DaemonSets`);
      continue;
    }
    // The server's Service is headless (callers balance over every pod),
    // unless it keeps each caller on its own node's server.
    if (selected.includes(server) && s.spec?.clusterIP !== "None" && s.spec?.internalTrafficPolicy !== "Local")
      problem(file, `Service ${s.metadata.name} is not headless: callers would pin one pod`);
    const names = new Set(selected.flatMap((w) => podsOf(w).spec.containers.flatMap((c) => (c.ports ?? []).map((p) => p.name))));
    for (const p of s.spec?.ports ?? [])
      if (typeof p.targetPort === "string" && !names.has(p.targetPort))
        problem(file, `Service port ${p.name} targets ${p.targetPort}, which no container names`);
  }
  for (const h of of("HorizontalPodAutoscaler")) {
    const t = h.spec?.scaleTargetRef;
    if (t?.kind !== "Deployment" || t?.name !== server.metadata.name)
      problem(file, "the autoscaler does not scale this Deployment");
    for (const m of h.spec?.metrics ?? [])
      if (m.type === "Pods" && !metricNames.has(m.pods.metric.name))
        problem(file, `the autoscaler's metric ${m.pods.metric.name} is not one the server exports`);
  }
  for (const b of of("PodDisruptionBudget"))
    if (!matches(b.spec?.selector?.matchLabels, labels)) problem(file, "the disruption budget selects no pod of the Deployment");
  // A Deployment of servers scales and is disrupted a pod at a time; a
  // DaemonSet has one a node.
  const required = server.kind === "Deployment" ? ["Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"] : ["Service"];
  for (const kind of required) if (of(kind).length === 0) problem(file, `no ${kind}`);
}

for (const p of problems) console.log(p);
console.log(`${files.length} manifests, ${problems.length} problems`);
process.exit(problems.length ? 1 : 0);
