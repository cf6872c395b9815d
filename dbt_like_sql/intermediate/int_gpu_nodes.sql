-- GPU node inventory per day, from the GPUs DCGM reported on each node.
with busy as (

    select * from {{ ref('int_gpu_busy') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

final as (

    select
        day,
        hostname,
        count(distinct gpu) as gpus,
        min(model_name) as model_name
    from busy
    group by day, hostname

)

select * from final
