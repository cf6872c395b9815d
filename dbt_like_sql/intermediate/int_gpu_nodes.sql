-- GPU nodes per day: the cluster inventory (stg_nodes) joined with the nodes DCGM reported.
-- GPU counts come from the inventory; the DCGM index count is kept to flag disagreements and
-- used only for a node the inventory does not list (on-prem hosts without a snapshot).
with busy as (

    select
        day,
        hostname,
        count(distinct gpu) as dcgm_gpus,
        min(model_name) as model_name,
        sum(samples) - sum(outside_samples) as day_samples,
        sum(outside_samples) as outside_samples
    from {{ ref('int_gpu_busy') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
    group by day, hostname

),

inventory as (

    select * from {{ ref('stg_nodes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and has_gpus

),

final as (

    select
        coalesce(i.day, b.day) as day,
        coalesce(i.node, b.hostname) as hostname,
        cast(coalesce(i.gpus, b.dcgm_gpus) as bigint) as gpus,
        cast(b.dcgm_gpus as bigint) as dcgm_gpus,
        cast(i.gpus as bigint) as inventory_gpus,
        -- DCGM modelName, else the GPU feature discovery product label
        coalesce(b.model_name, i.gpu_product) as model_name,
        i.provider,
        i.provider_id,
        i.provider_key,
        i.alt_provider_key,
        -- every instance the name stood for during the day (a replaced node: two; stg_nodes)
        i.instances,
        i.instance_type,
        i.node_pool,
        i.labels,
        i.node is not null as in_inventory,
        coalesce(b.day_samples, 0) > 0 as has_telemetry,
        cast(coalesce(b.outside_samples, 0) as bigint) as outside_samples
    from inventory as i
    full outer join busy as b on b.day = i.day and b.hostname = i.node

)

select * from final
