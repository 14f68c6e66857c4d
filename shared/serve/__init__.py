"""SkyServe's services in Corral's decision core: the ``service:`` section (:mod:`.spec`),
how many replicas to keep and which to replace (:mod:`.replicas`), and which ready replica a
request goes to (:mod:`.balance`). Pure: the adapters (runtime/serving.py, the API's relay)
carry the decisions out."""
