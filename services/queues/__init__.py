"""Publishing work to the workers' queues by task name (``dispatch``): the API, the CLI and
the runtime steps load no task code."""
