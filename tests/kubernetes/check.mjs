// Checks Kubernetes manifests against Kubernetes' own OpenAPI schemas (the
// kubernetes-models package, v1.27) and against the server they deploy:
//
//   node check.mjs SERVER_HELP METRICS MANIFEST...
//
// SERVER_HELP is `imgstat-server --help`, METRICS a scrape of its /metrics.
// Beyond the schemas: selectors that find the Deployment's pods, ports the
// probes and Service name, environment variables the server reads, threads
// and decode memory that follow the resources, the autoscaler's metric one
// the server exports. Prints each problem; exit 1 when there is any.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { Deployment } from "kubernetes-models/apps/v1";
import { Service } from "kubernetes-models/v1";
import { HorizontalPodAutoscaler } from "kubernetes-models/autoscaling/v2";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";

const models = {
  "apps/v1 Deployment": Deployment,
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
  const [deployment] = of("Deployment");
  if (!deployment) {
    problem(file, "no Deployment");
    continue;
  }
  const pod = deployment.spec?.template ?? {};
  const labels = pod.metadata?.labels;
  if (!matches(deployment.spec?.selector?.matchLabels, labels)) problem(file, "the Deployment's selector misses its pods");
  for (const c of pod.spec?.containers ?? []) {
    const ports = new Map((c.ports ?? []).map((p) => [p.name, p.containerPort]));
    const known = (p) => ports.has(p) || [...ports.values()].includes(p);
    for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
      const port = c[probe]?.grpc?.port ?? c[probe]?.tcpSocket?.port ?? c[probe]?.httpGet?.port;
      if (c[probe] && !known(port)) problem(file, `${probe} asks port ${port}, which the container does not open`);
    }
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
  for (const s of of("Service")) {
    if (!matches(s.spec?.selector, labels)) problem(file, `Service ${s.metadata.name} selects no pod of the Deployment`);
    if (s.spec?.clusterIP !== "None") problem(file, `Service ${s.metadata.name} is not headless: callers would pin one pod`);
    const names = new Set(pod.spec.containers.flatMap((c) => (c.ports ?? []).map((p) => p.name)));
    for (const p of s.spec?.ports ?? [])
      if (typeof p.targetPort === "string" && !names.has(p.targetPort))
        problem(file, `Service port ${p.name} targets ${p.targetPort}, which no container names`);
  }
  for (const h of of("HorizontalPodAutoscaler")) {
    const t = h.spec?.scaleTargetRef;
    if (t?.kind !== "Deployment" || t?.name !== deployment.metadata.name)
      problem(file, "the autoscaler does not scale this Deployment");
    for (const m of h.spec?.metrics ?? [])
      if (m.type === "Pods" && !metricNames.has(m.pods.metric.name))
        problem(file, `the autoscaler's metric ${m.pods.metric.name} is not one the server exports`);
  }
  for (const b of of("PodDisruptionBudget"))
    if (!matches(b.spec?.selector?.matchLabels, labels)) problem(file, "the disruption budget selects no pod of the Deployment");
  for (const kind of ["Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"])
    if (of(kind).length === 0) problem(file, `no ${kind}`);
}

for (const p of problems) console.log(p);
console.log(`${files.length} manifests, ${problems.length} problems`);
process.exit(problems.length ? 1 : 0);
