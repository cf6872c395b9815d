-- Cost of each training run, failed retries included: the unit is one run.
with requests as (

    select * from {{ ref('stg_requests') }}
    where workload = 'training_run'

),

cost as (

    select * from {{ ref('int_request_cost') }}

),

final as (

    select
        r.request_id,
        r.team,
        r.cost_center,
        r.lane,
        r.candidate_id,
        r.state,
        c.currency,
        c.first_day,
        c.last_day,
        c.attempts,
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
    from requests as r
    inner join cost as c on c.request_id = r.request_id

)

select * from final
