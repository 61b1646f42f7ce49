// The deployment files against the Kubernetes API schemas and against mopt itself:
//   - every manifest in deploy/k8s validates against its kind's schema (kubernetes-models: the API's OpenAPI schemas
//     compiled; a planted type error must fail, so the check is live), and kustomization.yaml lists them all;
//   - every flag that the Deployment, the Dockerfile and the systemd unit pass, and every key of serve.toml (commented
//     ones too), exists in `mopt serve --help`;
//   - the numbers agree: probes on /health at the served port, terminationGracePeriodSeconds covers preStop +
//     --drain-timeout + 2 s, the HPA's metric is what the Prometheus adapter's rule makes of a series mopt exports,
//     selectors match the pods, the model volume is read-only and never in the image, the container runs as non-root.
// kubectl apply --dry-run=client is not used: even in client mode it needs an API server for its resource mappings.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { PersistentVolumeClaim } from 'kubernetes-models/v1/PersistentVolumeClaim';
import { Service } from 'kubernetes-models/v1/Service';
import { check, eq, done, MOPT_BIN } from '../server/lib.mjs';

const SRC = process.env.MOPT_SOURCE_DIR;
const K8S = path.join(SRC, 'deploy/k8s');
const MODELS = {
  'apps/v1/Deployment': Deployment, 'v1/Service': Service, 'v1/PersistentVolumeClaim': PersistentVolumeClaim,
  'v1/ConfigMap': ConfigMap, 'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
};
const help = execFileSync(MOPT_BIN, ['serve', '--help'], { encoding: 'utf8' });
const serveFlags = new Set(help.match(/--[a-z][a-z0-9-]*/g));
const unknownFlags = (args) => args.filter((a) => a.startsWith('--')).map((a) => a.split('=')[0])
                                   .filter((f) => !serveFlags.has(f));
// "--name=value" or "--name value" -> value
const flagValue = (args, name) => {
  const i = args.findIndex((a) => a === name || a.startsWith(name + '='));
  if (i < 0) return undefined;
  return args[i].includes('=') ? args[i].slice(name.length + 1) : args[i + 1];
};

// ---- schemas
const objects = {};
const files = fs.readdirSync(K8S).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml').sort();
for (const f of files) {
  for (const doc of YAML.parseAllDocuments(fs.readFileSync(path.join(K8S, f), 'utf8'))) {
    check(doc.errors.length === 0, `${f} is YAML`, doc.errors.join('; '));
    const obj = doc.toJS();
    const Model = MODELS[`${obj.apiVersion}/${obj.kind}`];
    check(Model !== undefined, `${f}: ${obj.apiVersion} ${obj.kind} is a kind this test knows`);
    if (!Model) continue;
    let err = '';
    try { new Model(obj).validate(); } catch (e) { err = e.message; }
    eq(err, '', `${f}: ${obj.kind} ${obj.metadata.name} matches the API schema`);
    objects[obj.kind] = obj;
  }
}
const planted = structuredClone(objects.Deployment);
planted.spec.template.spec.containers[0].ports[0].containerPort = 'eight thousand';
let plantedErr = '';
try { new Deployment(planted).validate(); } catch (e) { plantedErr = e.message; }
check(/containerPort/.test(plantedErr), 'a planted type error fails the schema check', plantedErr);
const kustomization = YAML.parse(fs.readFileSync(path.join(K8S, 'kustomization.yaml'), 'utf8'));
eq([...kustomization.resources].sort(), files, 'kustomization.yaml lists every manifest');

// ---- the Deployment
const dep = objects.Deployment;
const pod = dep.spec.template;
const c = pod.spec.containers[0];
eq(c.args[0], 'serve', 'the container runs mopt serve');
eq(unknownFlags(c.args), [], 'every flag the Deployment passes exists in mopt serve --help');
const port = Number(flagValue(c.args, '--port'));
const http = c.ports.find((p) => p.name === 'http');
eq(http.containerPort, port, 'the container port named http is --port');
for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe'])
  eq([c[probe]?.httpGet?.path, c[probe]?.httpGet?.port], ['/health', 'http'], `${probe} on /health`);
const sleep = c.lifecycle.preStop.exec.command;
check(sleep[0] === 'sleep' && Number(sleep[1]) > 0, `preStop waits for the endpoints to drop the pod (${sleep.join(' ')})`);
const drain = Number(flagValue(c.args, '--drain-timeout'));
const grace = pod.spec.terminationGracePeriodSeconds;
check(drain > 0 && grace >= Number(sleep[1]) + drain + 2,
      `terminationGracePeriodSeconds ${grace} >= preStop ${sleep[1]} + --drain-timeout ${drain} + 2 s of abort`);
check(Number(c.resources.limits['nvidia.com/gpu']) >= 1, 'a GPU per replica');
eq(flagValue(c.args, '--device'), 'cuda', '... and mopt is told to use it');
const sc = { ...pod.spec.securityContext, ...c.securityContext };
check(sc.runAsNonRoot === true && sc.runAsUser > 0 && sc.allowPrivilegeEscalation === false &&
      sc.readOnlyRootFilesystem === true, 'non-root, no privilege escalation, read-only root file system');
const modelMount = c.volumeMounts.find((m) => flagValue(c.args, '--model').startsWith(m.mountPath + '/'));
check(modelMount && modelMount.readOnly === true, `the model is on a read-only volume (${modelMount?.mountPath})`);
const claim = pod.spec.volumes.find((v) => v.name === modelMount?.name)?.persistentVolumeClaim?.claimName;
eq(claim, objects.PersistentVolumeClaim.metadata.name, '... the PVC of model-pvc.yaml');
eq(c.env.find((e) => e.name === 'MOPT_API_KEY') !== undefined && help.includes('(Env:MOPT_API_KEY)'), true,
   'the API key comes from a Secret through MOPT_API_KEY, which mopt serve reads');
eq([pod.metadata.annotations['prometheus.io/port'], pod.metadata.annotations['prometheus.io/path']],
   [String(port), '/metrics'], 'prometheus.io annotations name the metrics port and path');
const labels = pod.metadata.labels;
const selects = (sel) => Object.entries(sel).every(([k, v]) => labels[k] === v);
check(selects(dep.spec.selector.matchLabels), 'the Deployment selects its pods');
check(selects(objects.Service.spec.selector) && objects.Service.spec.ports[0].targetPort === 'http',
      'the Service selects the pods and targets their http port');
check(selects(objects.PodDisruptionBudget.spec.selector.matchLabels), 'the PodDisruptionBudget selects the pods');

// ---- the autoscaler and the Prometheus adapter
const hpa = objects.HorizontalPodAutoscaler;
eq([hpa.spec.scaleTargetRef.kind, hpa.spec.scaleTargetRef.name], ['Deployment', dep.metadata.name],
   'the HPA scales the Deployment');
const adapter = YAML.parse(objects.ConfigMap.data['config.yaml']);
const rule = adapter.rules[0];
const series = rule.seriesQuery.match(/^[\w:]+/)[0];
const exposed = series.replace(new RegExp(rule.name.matches), rule.name.as.replace(/\$\{(\d+)\}/g, '$$$1'));
eq(hpa.spec.metrics[0].pods.metric.name, exposed, `the HPA's metric is the adapter's name for ${series}`);
eq(series, 'mopt:num_requests_waiting', '... the waiting requests');
const promK8s = YAML.parse(fs.readFileSync(path.join(SRC, 'deploy/monitoring/prometheus-kubernetes.yml'), 'utf8'));
const targets = promK8s.scrape_configs[0].relabel_configs.map((r) => r.target_label).filter(Boolean);
check(Object.keys(rule.resources.overrides).every((l) => targets.includes(l)),
      `the in-cluster scrape config labels series with ${Object.keys(rule.resources.overrides)} for the adapter ` +
      '(Debian\'s promtool has no Kubernetes discovery to check that file)');

// ---- the Dockerfile
const dockerfile = fs.readFileSync(path.join(SRC, 'deploy/docker/Dockerfile'), 'utf8').replace(/\\\n/g, ' ');
const lines = dockerfile.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
const lastFrom = lines.map((l, i) => [l, i]).filter(([l]) => l.startsWith('FROM ')).pop();
const final = lines.slice(lastFrom[1]);
check(/^FROM nvidia\/cuda:\$\{CUDA_VERSION\}-runtime-/.test(lastFrom[0]), `the image is a CUDA runtime (${lastFrom[0]})`);
const user = final.filter((l) => l.startsWith('USER ')).pop()?.split(/\s+/)[1] ?? 'root';
check(!/^(0|root)(:|$)/.test(user), `it runs as a non-root user (USER ${user})`);
const copies = lines.filter((l) => /^(COPY|ADD) /.test(l));
check(final.includes('VOLUME /models') && copies.length > 0 && !copies.some((l) => /gguf|safetensors|models/i.test(l)),
      'the model is a volume, never copied in (no COPY or ADD of models)');
const cmd = JSON.parse(final.find((l) => l.startsWith('CMD ')).slice(4));
eq([JSON.parse(final.find((l) => l.startsWith('ENTRYPOINT ')).slice(11)), cmd[0]], [['mopt'], 'serve'],
   'ENTRYPOINT mopt, CMD serve ...');
eq(unknownFlags(cmd), [], 'every flag of the Dockerfile\'s CMD exists in mopt serve --help');
const ignore = fs.readFileSync(path.join(SRC, '.dockerignore'), 'utf8').split('\n');
check(['*.gguf', '*.safetensors', 'build*/', '**/node_modules/'].every((p) => ignore.includes(p)),
      '.dockerignore keeps models, builds and node packages out of the build context');

// ---- the systemd unit and serve.toml
const unit = fs.readFileSync(path.join(SRC, 'deploy/systemd/mopt.service'), 'utf8');
const exec = unit.match(/^ExecStart=(.*)$/m)[1].split(/\s+/);
eq(exec.slice(0, 2), ['/usr/bin/mopt', 'serve'], 'the unit runs mopt serve');
eq(unknownFlags(exec), [], 'every flag of the unit\'s ExecStart exists in mopt serve --help');
const toml = fs.readFileSync(path.join(SRC, 'deploy/serve.toml'), 'utf8');
const keys = [...toml.matchAll(/^#?\s*([a-z][a-z0-9-]*)\s*=/gm)].map((m) => m[1]);
check(keys.length >= 10, `serve.toml has ${keys.length} settings (commented ones included)`);
eq(keys.filter((k) => !serveFlags.has('--' + k)), [], 'every key of serve.toml is a long flag of mopt serve');
const stopTimeout = Number(unit.match(/^TimeoutStopSec=(\d+)/m)[1]);
const tomlDrain = Number(toml.match(/^drain-timeout\s*=\s*(\d+)/m)[1]);
check(stopTimeout >= tomlDrain + 2 + 5, `TimeoutStopSec ${stopTimeout} covers serve.toml's drain-timeout ${tomlDrain}`);
done();
