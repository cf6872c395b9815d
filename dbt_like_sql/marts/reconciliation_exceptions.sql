-- One row per reconciliation problem of the day, with its money and what was done with it:
--   unreconciled: the money is held on chargeback's '(unreconciled)' row, charged to no team
--   charged:      the money is charged (price book) but the row says why it is doubtful
--   unpriced:     GPU time with no price at all (no bill, no price-book entry, or no known node)
--   info:         no money moves (a count disagreement, samples outside their day)
with nodes as (

    select * from {{ ref('int_gpu_nodes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

prices as (

    select * from {{ ref('int_node_hour_prices') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

idle as (

    select * from {{ ref('int_idle_capacity') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

classes as (

    select * from {{ ref('int_billing_classes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

unattributed as (

    select * from {{ ref('int_unattributed_gpu_hours') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

unpriced_pod_rows as (

    select * from {{ ref('int_pod_gpu_hours') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and currency is null

),

unpriced_pods as (

    select day, hostname, sum(allocated_gpu_hours) as gpu_hours, count(*) as pods
    from unpriced_pod_rows
    group by day, hostname

),

known_nodes as (

    select day, hostname from nodes
    where has_telemetry or in_inventory

),

problems as (

    select
        day, 'bill_without_telemetry' as kind, 'unreconciled' as treatment, currency,
        unreconciled_cost as amount, capacity_gpu_hours - allocated_gpu_hours as gpu_hours,
        hostname, cast(null as varchar) as namespace, cast(null as varchar) as pod,
        cast(null as varchar) as source, cast(null as integer) as source_row, price_source,
        'billed GPU node ' || hostname || ' reported no DCGM samples on the day: its cost nobody was '
            || 'allocated (' || cast(unreconciled_cost as varchar) || ' ' || currency || ') is not idle cost' as reason
    from idle
    where price_source = 'billing' and not has_telemetry

    union all

    select
        day, 'bill_without_telemetry', 'unreconciled', currency, effective_cost, cast(null as double),
        resource_id, null, null, source, source_row, 'billing',
        'GPU instance billing row (' || coalesce(charge_description, resource_id, '?')
            || ') matches no inventory node and no DCGM host'
    from classes
    where billing_class = 'gpu_instance_without_node'

    union all

    select
        day, 'duplicated_billing_row', 'unreconciled', currency, effective_cost, cast(null as double),
        coalesce(hostname, resource_id), null, null, source, source_row, 'billing',
        'billing row repeats an earlier row (same account, resource, charge period, SKU and cost): not priced'
    from classes
    where billing_class = 'duplicate'

    union all

    select
        day, 'telemetry_without_bill', 'charged', currency, node_cost, capacity_gpu_hours,
        hostname, null, null, null, null, price_source,
        provider || ' node ' || hostname || ' has no billing row for the day: priced from the price book ('
            || coalesce(price_book_source, '?') || ')'
    from prices
    where price_source = 'price_book' and provider is not null

    union all

    select
        n.day, 'node_without_price', 'unpriced', cast(null as varchar), cast(0 as decimal(18, 6)),
        coalesce(u.gpu_hours, 0.0),
        n.hostname, null, null, null, null, cast(null as varchar),
        'GPU node ' || n.hostname || ' has no billing row and no price-book entry for model '
            || coalesce('''' || n.model_name || '''', 'NULL (no DCGM modelName, no nvidia.com/gpu.product label)')
            || coalesce(': ' || cast(u.pods as varchar) || ' pod(s) on it have no price', '')
    from nodes as n
    anti join prices as p on p.day = n.day and p.hostname = n.hostname
    left join unpriced_pods as u on u.day = n.day and u.hostname = n.hostname
    where n.has_telemetry or n.in_inventory

    union all

    -- a pod of an admitted request on a host no node_without_price row covers (in no node inventory,
    -- no DCGM samples of the day) or with no recorded host: its GPU time has no price either
    select
        p.day, 'pod_without_price', 'unpriced', cast(null as varchar), cast(0 as decimal(18, 6)),
        p.allocated_gpu_hours,
        p.hostname, p.namespace, p.pod, null, null, cast(null as varchar),
        'pod ' || p.namespace || '/' || p.pod || ' of request ' || p.request_id
            || case when p.hostname is null then ' has no recorded node'
                    else ' ran on ' || p.hostname || ', which is in no node inventory and sent no DCGM samples on the day'
               end
            || ': its ' || cast(round(p.allocated_gpu_hours, 3) as varchar)
            || ' GPU-hours have no price and are in no unit cost (see unpriced_requests)'
    from unpriced_pod_rows as p
    anti join known_nodes as n on n.day = p.day and n.hostname = p.hostname

    union all

    select
        day, 'sample_outside_day', 'info', null, cast(0 as decimal(18, 6)), cast(null as double),
        hostname, null, null, null, null, null,
        cast(outside_samples as varchar) || ' sample(s) of ' || cast(day as varchar)
            || ' were loaded under another day''s feeds'
            || case when has_telemetry or in_inventory then '' else ': they alone do not make the node a priced GPU node' end
    from nodes
    where outside_samples > 0

    union all

    select
        day, 'gpu_count_disagreement', 'info', null, cast(0 as decimal(18, 6)), cast(null as double),
        hostname, null, null, null, null, null,
        'DCGM reported ' || cast(dcgm_gpus as varchar) || ' GPU index(es), the node inventory '
            || cast(inventory_gpus as varchar) || ' GPU(s): priced on the inventory count'
    from nodes
    where in_inventory and dcgm_gpus is not null and dcgm_gpus <> inventory_gpus

    union all

    select
        day, 'unattributed_pod_time', case when cost is null then 'unpriced' else 'unreconciled' end, currency,
        coalesce(cost, 0), gpu_hours,
        hostname, namespace, pod, null, null, price_source,
        reason || ': ' || cast(round(gpu_hours, 3) as varchar) || ' GPU-hours on no admitted request, in namespace '
            || namespace || ', which no team owns (policy teams.<team>.namespace)'
    from unattributed
    where not bypass

    union all

    -- GPU time of a team's own namespace on no admitted request: charged to the team, flagged
    select
        day, 'bypass_pod_time', case when cost is null then 'unpriced' else 'charged' end, currency,
        coalesce(cost, 0), gpu_hours,
        hostname, namespace, pod, null, null, price_source,
        reason || ': ' || cast(round(gpu_hours, 3) as varchar) || ' GPU-hours on no admitted request, charged to team '
            || team || ' (owner of namespace ' || namespace || ') as bypass'
    from unattributed
    where bypass

),

final as (

    select
        day,
        kind || ':' || coalesce(hostname, '') || ':' || coalesce(namespace || '/' || pod, '')
            || ':' || coalesce(source || '#' || cast(source_row as varchar), '') as exception_id,
        kind,
        treatment,
        currency,
        cast(amount as decimal(18, 6)) as amount,
        gpu_hours,
        hostname,
        namespace,
        pod,
        source,
        source_row,
        price_source,
        reason
    from problems

)

select * from final
