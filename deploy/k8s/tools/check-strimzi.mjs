// Validates KafkaTopic objects (a JSON array on stdin) against the OpenAPI schema of Strimzi's
// KafkaTopic CRD, as compiled by @kubernetes-models/strimzi-kafka-operator (package.json here).
// Prints one line per object; exits 1 if any is invalid. Run by tests/unit/tuner/test_k8s_validate.py.
import { readFileSync } from "node:fs";
import { KafkaTopic as V1 } from "@kubernetes-models/strimzi-kafka-operator/kafka.strimzi.io/v1/KafkaTopic";
import { KafkaTopic as V1beta2 } from "@kubernetes-models/strimzi-kafka-operator/kafka.strimzi.io/v1beta2/KafkaTopic";

const models = { "kafka.strimzi.io/v1": V1, "kafka.strimzi.io/v1beta2": V1beta2 };
let bad = 0;
for (const doc of JSON.parse(readFileSync(0, "utf8"))) {
  const Model = models[doc.apiVersion];
  try {
    if (!Model || doc.kind !== "KafkaTopic") throw new Error(`not a KafkaTopic of ${Object.keys(models)}`);
    new Model(doc).validate();
    console.log(`valid ${doc.apiVersion} ${doc.metadata.name}`);
  } catch (e) {
    bad++;
    console.log(`invalid ${doc.apiVersion} ${doc?.metadata?.name}: ${e.message}`);
  }
}
process.exit(bad ? 1 : 0);
