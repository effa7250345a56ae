"""The KafkaMirrorMaker2 resource: its schema, defaults and validation (`model`), imports from Strimzi and
mm2.properties (`importer`), planning into flow groups (`plan`), the flow-group config the job runs
(`flowgroup`) and the names of derived objects (`names`).

Pure: no Kubernetes, Spark or Kafka client here, so the operator, the local runner and the job share one
definition.
"""
