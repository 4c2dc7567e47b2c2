// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/*
 * Multicall3 — minimal local deployment with the canonical Multicall3 ABI for `aggregate3` and the
 * block/chain helpers. As in the canonical contract, a failing call whose `allowFailure` is false
 * reverts the whole batch with Error("Multicall3: call failed"); calls are plain CALLs (msg.sender is
 * this contract) and `aggregate3` forwards no value.
 */

import {IMulticall3} from "./interfaces/IMulticall3.sol";

contract Multicall3 is IMulticall3 {
    function aggregate3(Call3[] calldata calls) external payable override returns (Result[] memory returnData) {
        uint256 length = calls.length;
        returnData = new Result[](length);
        for (uint256 i; i < length; ++i) {
            Call3 calldata c = calls[i];
            (bool success, bytes memory ret) = c.target.call(c.callData);
            if (!success && !c.allowFailure) revert("Multicall3: call failed");
            returnData[i] = Result({success: success, returnData: ret});
        }
    }

    function getBlockNumber() external view override returns (uint256 blockNumber) {
        blockNumber = block.number;
    }

    function getChainId() external view override returns (uint256 chainid) {
        chainid = block.chainid;
    }

    function getCurrentBlockTimestamp() external view override returns (uint256 timestamp) {
        timestamp = block.timestamp;
    }

    function getEthBalance(address addr) external view override returns (uint256 balance) {
        balance = addr.balance;
    }
}
