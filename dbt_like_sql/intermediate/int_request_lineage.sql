-- Every request with each request of its lineage tree (itself included): the transitive closure of
-- the recorded edges child -> parent (label batches -> training incl. failed attempts -> replays ->
-- evidence pack -> release). `union` (not `union all`) ends the recursion on a cycle.
with recursive edges as (

    select distinct child_request_id, parent_request_id from {{ source('raw_request_lineage') }}

),

tree(request_id, ancestor_request_id, depth) as (

    select request_id, request_id, 0 from {{ ref('stg_requests') }}
    union
    select t.request_id, e.parent_request_id, t.depth + 1
    from tree as t
    inner join edges as e on e.child_request_id = t.ancestor_request_id
    where t.depth < 64

),

final as (

    select request_id, ancestor_request_id, min(depth) as depth
    from tree
    group by request_id, ancestor_request_id

)

select * from final
