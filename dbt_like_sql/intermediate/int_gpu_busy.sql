-- Busy samples summed per GPU, pod, metric and day: the only pass over the raw samples.
with samples as (

    select * from {{ ref('stg_dcgm_samples') }}

),

final as (

    select
        day,
        hostname,
        gpu,
        gpu_instance_id,
        namespace,
        pod,
        metric,
        min(model_name) as model_name,
        count(*) as samples,
        sum(busy) as busy_samples
    from samples
    group by day, hostname, gpu, gpu_instance_id, namespace, pod, metric

)

select * from final
