-- Cost of each training run, failed retries included: the unit is one run.
{% call request_unit_cost('training_run', ['lane', 'candidate_id']) %}
        c.failed_attempts,
        c.allocated_gpu_hours,
        c.used_gpu_hours,
        c.failed_attempt_cost,
        c.gpu_cost,
        c.cpu_cost,
        c.storage_cost,
        c.cost as cost_per_training_run,
        -- what the figure counts: every part is measured per pod; idle, shared, tax and credits are
        -- distributed in chargeback only
        'measured: gpu_cost, cpu_cost, storage_cost; distributed: none' as cost_parts
{% endcall %}
