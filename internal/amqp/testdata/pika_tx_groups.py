#!/usr/bin/env python3
# pika against a transaction over two broker groups: connected to group
# a (AMQP_HOST, AMQP_PORT), one transaction publishes to a's queue and to
# b's (B_PORT) and acks a delivery of b's queue; tx_rollback discards all
# of it, tx_commit applies all of it; then b is stopped (the harness does,
# when the script prints "stop b" and reads a line) and a commit touching
# b's queue fails with a channel error, never commit-ok. Prints "ok" and
# exits 0, or raises.
import os
import sys

import pika

host = os.environ['AMQP_HOST']
a = pika.BlockingConnection(pika.ConnectionParameters(host=host, port=int(os.environ['AMQP_PORT'])))
b = pika.BlockingConnection(pika.ConnectionParameters(host=host, port=int(os.environ['B_PORT'])))
ob = b.channel()
ob.queue_declare(queue='pk-qb', durable=True)
ob.basic_publish(exchange='', routing_key='pk-qb', body=b'old', properties=pika.BasicProperties(delivery_mode=2))
oa = a.channel()
oa.queue_declare(queue='pk-qa', durable=True)


def depth(ch, q):
    return ch.queue_declare(queue=q, passive=True).method.message_count


ch = a.channel()
ch.tx_select()
m, _, body = ch.basic_get(queue='pk-qb')
assert body == b'old', body
ch.basic_publish(exchange='', routing_key='pk-qa', body=b'to-a', properties=pika.BasicProperties(delivery_mode=2))
ch.basic_publish(exchange='', routing_key='pk-qb', body=b'to-b', properties=pika.BasicProperties(delivery_mode=2))
ch.basic_ack(m.delivery_tag)
ch.queue_declare(queue='pk-qa', passive=True)  # a round trip: all of it arrived
ch.tx_rollback()
assert depth(oa, 'pk-qa') == 0 and depth(ob, 'pk-qb') == 0, 'after rollback'

ch.basic_publish(exchange='', routing_key='pk-qa', body=b'to-a', properties=pika.BasicProperties(delivery_mode=2))
ch.basic_publish(exchange='', routing_key='pk-qb', body=b'to-b', properties=pika.BasicProperties(delivery_mode=2))
ch.basic_ack(m.delivery_tag)
ch.tx_commit()
assert depth(oa, 'pk-qa') == 1, 'pk-qa after commit: %d' % depth(oa, 'pk-qa')
assert depth(ob, 'pk-qb') == 1, 'pk-qb after commit: %d' % depth(ob, 'pk-qb')  # old acked, to-b in
_, _, got = ob.basic_get(queue='pk-qb', auto_ack=True)
assert got == b'to-b', got
b.close()

ch.basic_publish(exchange='', routing_key='pk-qb', body=b'never', properties=pika.BasicProperties(delivery_mode=2))
ch.basic_publish(exchange='', routing_key='pk-qa', body=b'never', properties=pika.BasicProperties(delivery_mode=2))
ch.queue_declare(queue='pk-qa', passive=True)
print('stop b', flush=True)
sys.stdin.readline()
try:
    ch.tx_commit()
    raise AssertionError('commit-ok with the home of pk-qb down')
except pika.exceptions.ChannelClosedByBroker as e:
    assert e.reply_code == 404 and 'transaction not committed' in e.reply_text, e
assert depth(oa, 'pk-qa') == 1, 'pk-qa after the failed commit: %d' % depth(oa, 'pk-qa')
print('ok')
